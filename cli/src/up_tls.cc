#include "up_tls.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "strata/common/file_util.h"
#include "strata/proto/certificates.h"
#include "supervisor.h"

namespace strata::cli {
namespace {

// One run's certificates, written to <log_dir>/tls/<prefix>ca.crt, <prefix>tls.crt and
// <prefix>tls.key: valid for 30 days (a cluster left up that long keeps working), named for this
// machine's loopback and the bind address. Cluster peers check the chain, not these names;
// HTTPS clients check the names too. The CA's key is not kept: nothing else can be issued.
struct ThrowawayFiles {
  std::string ca, cert, key;
};
absl::StatusOr<ThrowawayFiles> WriteThrowawayTls(const ClusterConfig& c,
                                                 const std::string& prefix) {
  const std::string dir = c.log_dir + "/tls";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  const absl::Duration validity = absl::Hours(24 * 30);
  auto ca = proto::MakeCertificateAuthority("strata up throwaway CA", validity);
  if (!ca.ok()) return ca.status();
  proto::LeafSpec spec;
  spec.common_name = "strata-up";
  spec.validity = validity;
  const std::string host = ConnectHost(c.host);
  if (host != "127.0.0.1" && host.find_first_not_of("0123456789.") == std::string::npos) {
    spec.ip_addresses.push_back(host);
  } else if (host != "127.0.0.1") {
    spec.dns_names.push_back(host);
  }
  auto leaf = proto::IssueLeafCertificate(*ca, spec);
  if (!leaf.ok()) return leaf.status();
  ThrowawayFiles files{dir + "/" + prefix + "ca.crt", dir + "/" + prefix + "tls.crt",
                       dir + "/" + prefix + "tls.key"};
  for (const auto& [path, text, mode] : {std::tuple{files.ca, ca->cert_pem, 0644},
                                         {files.cert, leaf->cert_pem, 0644},
                                         {files.key, leaf->key_pem, 0600}}) {
    if (auto s = proto::WritePrivateFile(path, text, mode); !s.ok()) return s;
  }
  return files;
}

absl::Status CheckGivenTls(const ClusterConfig& c) {
  std::string texts[3];
  const std::string* paths[3] = {&c.tls.ca, &c.tls.cert, &c.tls.key};
  for (int i = 0; i < 3; ++i) {
    auto text = ReadFileToString(*paths[i]);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tls: ", text.status().message()));
    }
    texts[i] = *std::move(text);
  }
  auto summary = proto::CheckCertificateChain(texts[0], texts[1], texts[2]);
  if (!summary.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls: ", c.tls.cert, ": ", summary.status().message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareClusterTls(ClusterConfig& c) {
  if (c.tls.mode == "auto") {
    auto files = WriteThrowawayTls(c, "");
    if (!files.ok()) return files.status();
    c.tls.ca = files->ca;
    c.tls.cert = files->cert;
    c.tls.key = files->key;
  }
  if (c.tls.mode == "files") return CheckGivenTls(c);
  return absl::OkStatus();
}

absl::Status PrepareRouterHttpTls(ClusterConfig& c) {
  ClusterConfig::Router::HttpTls& h = c.router.http_tls;
  if (h.mode != "auto") return absl::OkStatus();
  if (c.tls.mode == "auto" && !c.tls.cert.empty()) {
    h.ca = c.tls.ca;
    h.cert = c.tls.cert;
    h.key = c.tls.key;
    return absl::OkStatus();
  }
  auto files = WriteThrowawayTls(c, "http-");
  if (!files.ok()) return files.status();
  h.ca = files->ca;
  h.cert = files->cert;
  h.key = files->key;
  return absl::OkStatus();
}

}  // namespace strata::cli
