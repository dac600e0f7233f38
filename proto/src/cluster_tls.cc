#include "strata/proto/cluster_tls.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "strata/common/file_util.h"
#include "strata/proto/certificates.h"

namespace strata::proto {
namespace {

namespace gx = grpc::experimental;

ABSL_CONST_INIT absl::Mutex g_mu(absl::kConstInit);
std::shared_ptr<const ClusterCredentials>& Current() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_mu) {
  // Never destroyed: channels and servers may outlive static destruction order.
  static auto* current =
      new std::shared_ptr<const ClusterCredentials>(ClusterCredentials::Plaintext());
  return *current;
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", text.status().message()));
  }
  return text;
}

}  // namespace

absl::Status TlsFiles::CheckComplete() const {
  std::vector<std::string> missing;
  if (ca.empty()) missing.push_back("--tls-ca");
  if (cert.empty()) missing.push_back("--tls-cert");
  if (key.empty()) missing.push_back("--tls-key");
  if (missing.empty() || missing.size() == 3) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--tls-ca, --tls-cert and --tls-key go together (all three for mTLS, none for plaintext): ",
      absl::StrJoin(missing, ", "), " missing"));
}

std::shared_ptr<const ClusterCredentials> ClusterCredentials::Plaintext() {
  std::shared_ptr<ClusterCredentials> c(new ClusterCredentials());
  c->channel_ = grpc::InsecureChannelCredentials();
  c->server_ = grpc::InsecureServerCredentials();
  c->description_ = "plaintext";
  return c;
}

absl::StatusOr<std::shared_ptr<const ClusterCredentials>> ClusterCredentials::FromFiles(
    const TlsFiles& files, absl::Duration refresh) {
  if (auto s = files.CheckComplete(); !s.ok()) return s;
  if (!files.enabled()) return absl::InvalidArgumentError("no --tls-* files given");
  absl::StatusOr<std::string> ca = ReadPem("--tls-ca", files.ca);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadPem("--tls-cert", files.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("--tls-key", files.key);
  if (!key.ok()) return key.status();
  absl::StatusOr<CertificateSummary> summary = CheckCertificateChain(*ca, *cert, *key);
  if (!summary.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", files.cert, " (with --tls-key ",
                                                   files.key, ", --tls-ca ", files.ca,
                                                   "): ", summary.status().message()));
  }
  const auto refresh_s =
      static_cast<unsigned int>(std::max<int64_t>(1, absl::ToInt64Seconds(refresh)));
  auto provider = std::make_shared<gx::FileWatcherCertificateProvider>(files.key, files.cert,
                                                                       files.ca, refresh_s);

  gx::TlsChannelCredentialsOptions channel;
  channel.set_certificate_provider(provider);
  channel.watch_root_certs();
  channel.watch_identity_key_cert_pairs();
  // The chain is verified against the cluster CA; host names are not checked (cluster_tls.h).
  channel.set_verify_server_certs(true);
  channel.set_certificate_verifier(std::make_shared<gx::NoOpCertificateVerifier>());
  channel.set_check_call_host(false);

  gx::TlsServerCredentialsOptions server(provider);
  server.watch_root_certs();
  server.watch_identity_key_cert_pairs();
  server.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);

  std::shared_ptr<ClusterCredentials> c(new ClusterCredentials());
  c->tls_ = true;
  c->channel_ = gx::TlsCredentials(channel);
  c->server_ = gx::TlsServerCredentials(server);
  if (c->channel_ == nullptr || c->server_ == nullptr) {
    return absl::InternalError("gRPC could not create TLS credentials");
  }
  c->description_ = absl::StrCat(
      "mTLS (certificate ", summary->subject, ", valid until ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", summary->not_after, absl::UTCTimeZone()), "; CA ",
      files.ca, "; re-read every ", refresh_s, " s)");
  return std::shared_ptr<const ClusterCredentials>(std::move(c));
}

void SetClusterCredentials(std::shared_ptr<const ClusterCredentials> credentials) {
  absl::MutexLock lock(&g_mu);
  Current() = credentials ? std::move(credentials) : ClusterCredentials::Plaintext();
}

std::shared_ptr<const ClusterCredentials> GetClusterCredentials() {
  absl::MutexLock lock(&g_mu);
  return Current();
}

std::string PeerIdentity(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  std::vector<std::string> parts;
  for (const auto& v : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    parts.emplace_back(v.data(), v.size());
  }
  for (const auto& v : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    parts.emplace_back(v.data(), v.size());
  }
  return absl::StrJoin(parts, " ");
}

std::vector<std::string> PeerRoles(const grpc::ServerContext& context) {
  static constexpr const char* kRoles[] = {"router", "worker", "prefill",
                                           "decode", "mixed",  "kvstore"};
  std::vector<std::string> out;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return out;
  for (const auto& v : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
    const absl::string_view uri(v.data(), v.size());
    if (!absl::StartsWith(uri, "spiffe://")) continue;
    const absl::string_view last = uri.substr(uri.rfind('/') + 1);
    for (const char* role : kRoles) {
      if (last == role) out.emplace_back(last);
    }
  }
  return out;
}

}  // namespace strata::proto
