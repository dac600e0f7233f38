#pragma once
// The credentials of a process's cluster gRPC (router registry, Worker and KvStore services, and
// every channel between them): plaintext, or mutual TLS with a cluster CA.
//
// With mTLS every server requires a client certificate and verifies it against the cluster CA
// (a peer without one, or with one from another CA, fails the handshake before any RPC), and
// every channel presents this process's certificate and verifies the server's chain against the
// same CA. Host names are not checked: workers advertise IP addresses, pods change them, and a
// certificate per address would tie issuance to scheduling. Identity is "holds a key certified
// by the cluster CA" (docs/deploy.md, Security), so the CA must sign nothing else.
//
// The three PEM files are watched: gRPC re-reads them every `refresh`, and handshakes after a
// change use the new certificate and CA (connections already up keep theirs until they
// reconnect). Replace them atomically (write and rename, or a Kubernetes Secret volume); a
// certificate that does not match its key while being replaced is ignored until it does.
//
// The process's credentials are one setting (SetClusterCredentials), made once at startup before
// any server or channel exists: MakeChannel() and ServerCredentials() (protocol.h) read it.
// Thread-safe.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace strata::proto {

// The --tls-ca, --tls-cert and --tls-key paths (PEM). All empty: plaintext.
struct TlsFiles {
  std::string ca;
  std::string cert;
  std::string key;

  bool enabled() const { return !ca.empty() || !cert.empty() || !key.empty(); }
  // OK for all three or none; else InvalidArgument naming the missing flags.
  absl::Status CheckComplete() const;
};

class ClusterCredentials {
 public:
  static std::shared_ptr<const ClusterCredentials> Plaintext();

  // Reads and checks the files (CheckCertificateChain: the key matches, the certificate chains
  // to the CA and is valid now) and starts watching them. InvalidArgument naming the file and
  // the reason, e.g. "--tls-cert /x/tls.crt: the certificate does not verify against the CA:
  // certificate has expired". `files` must be enabled().
  static absl::StatusOr<std::shared_ptr<const ClusterCredentials>> FromFiles(
      const TlsFiles& files, absl::Duration refresh = absl::Seconds(30));

  bool tls() const { return tls_; }
  std::shared_ptr<grpc::ChannelCredentials> channel() const { return channel_; }
  std::shared_ptr<grpc::ServerCredentials> server() const { return server_; }
  // "plaintext", or "mTLS (certificate CN=...; CA /path)", for logs.
  const std::string& description() const { return description_; }

 private:
  ClusterCredentials() = default;
  bool tls_ = false;
  std::shared_ptr<grpc::ChannelCredentials> channel_;
  std::shared_ptr<grpc::ServerCredentials> server_;
  std::string description_;
};

// The process's cluster credentials (plaintext until set).
void SetClusterCredentials(std::shared_ptr<const ClusterCredentials> credentials);
std::shared_ptr<const ClusterCredentials> GetClusterCredentials();

// For a server handler: the authenticated peer's certificate subject and URI SANs
// ("CN=worker,O=strata spiffe://strata/worker"), or "" on a plaintext connection.
std::string PeerIdentity(const grpc::ServerContext& context);

// The cluster roles a certificate names: the last path segment of each of its spiffe:// URI SANs
// that is one of router, worker, prefill, decode, mixed, kvstore ("spiffe://strata/worker" ->
// "worker"). Empty for a plaintext peer or a certificate that names no role (one shared
// certificate for the whole cluster).
std::vector<std::string> PeerRoles(const grpc::ServerContext& context);

}  // namespace strata::proto
