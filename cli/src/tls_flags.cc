#include "tls_flags.h"

#include <cstdio>

namespace strata::cli {

void AddRouterFlags(ArgParser& parser, std::string* routers, std::string* service) {
  parser.AddString("--router", routers,
                   "routers' registries, host:port[,host:port...]: registers with each (empty and "
                   "no --router-service: standalone)");
  parser.AddString("--router-service", service,
                   "host:port whose name resolves to every router (a headless Service), "
                   "re-resolved every 5 s: registers with each address");
}

void AddTlsFlags(ArgParser& parser, proto::TlsFiles* files) {
  parser.AddString("--tls-ca", &files->ca,
                   "cluster CA certificate(s), PEM: with --tls-cert and --tls-key, every cluster "
                   "gRPC server and channel uses mutual TLS verified against this CA");
  parser.AddString("--tls-cert", &files->cert,
                   "this process's certificate (PEM, signed by the CA; intermediates may follow); "
                   "re-read when it changes");
  parser.AddString("--tls-key", &files->key, "the certificate's private key (PEM)");
}

absl::Status ApplyTlsFlags(const proto::TlsFiles& files) {
  if (auto s = files.CheckComplete(); !s.ok()) return s;
  if (!files.enabled()) return absl::OkStatus();  // plaintext, the default
  auto credentials = proto::ClusterCredentials::FromFiles(files);
  if (!credentials.ok()) return credentials.status();
  std::fprintf(stderr, "cluster gRPC: %s\n", (*credentials)->description().c_str());
  proto::SetClusterCredentials(*std::move(credentials));
  return absl::OkStatus();
}

void AddHttpTlsFlags(ArgParser& parser, http::TlsOptions* tls) {
  parser.AddString(
      "--http-tls-cert", &tls->cert_file,
      "HTTPS on the HTTP port: the server certificate (PEM, intermediates may follow); "
      "with --http-tls-key. Re-read when it changes (new connections get the new one)");
  parser.AddString("--http-tls-key", &tls->key_file, "the HTTPS certificate's private key (PEM)");
  parser.AddString("--http-tls-client-ca", &tls->client_ca_file,
                   "with HTTPS: require client certificates signed by these CA(s) (PEM)");
}

absl::Status CheckHttpTlsFlags(const http::TlsOptions& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--http-tls-cert and --http-tls-key go together");
  }
  if (!tls.client_ca_file.empty() && !tls.enabled()) {
    return absl::InvalidArgumentError(
        "--http-tls-client-ca needs --http-tls-cert and --http-tls-key");
  }
  return absl::OkStatus();
}

}  // namespace strata::cli
