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

// One run's certificates: valid for 30 days (a cluster left up that long keeps working), named
// for this machine's loopback and the bind address. Peers check the chain, not these names.
absl::Status WriteThrowawayTls(ClusterConfig& c) {
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
  c.tls.ca = dir + "/ca.crt";
  c.tls.cert = dir + "/tls.crt";
  c.tls.key = dir + "/tls.key";
  // The CA's key is not kept: nothing else can be issued for this run.
  for (const auto& [path, text, mode] : {std::tuple{c.tls.ca, ca->cert_pem, 0644},
                                         {c.tls.cert, leaf->cert_pem, 0644},
                                         {c.tls.key, leaf->key_pem, 0600}}) {
    if (auto s = proto::WritePrivateFile(path, text, mode); !s.ok()) return s;
  }
  return absl::OkStatus();
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
  if (c.tls.mode == "auto") return WriteThrowawayTls(c);
  if (c.tls.mode == "files") return CheckGivenTls(c);
  return absl::OkStatus();
}

}  // namespace strata::cli
