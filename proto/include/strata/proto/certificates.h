#pragma once
// X.509 material for the cluster's mutual TLS, made and checked with OpenSSL's libcrypto: a
// throwaway cluster CA and leaf certificates signed by it (what `strata up` writes for one
// machine, and what tests use), and the check every process runs on its certificate files
// before it serves (the key matches the certificate, which chains to the cluster CA and is
// valid now).
//
// Keys are ECDSA P-256; certificates are X.509 v3 signed with SHA-256. A leaf carries both
// extended key usages (serverAuth and clientAuth): every strata process is a gRPC server to
// some peers and a client of others. All functions are thread-safe.
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace strata::proto {

// A certificate and its private key, both PEM ("BEGIN CERTIFICATE", PKCS#8 "BEGIN PRIVATE KEY").
struct PemKeyPair {
  std::string cert_pem;
  std::string key_pem;
};

// What a leaf certificate names. Subject alternative names are informational for strata's own
// peers (they check the chain, not host names; docs/deploy.md, Security) but let other TLS
// clients check host names.
struct LeafSpec {
  std::string common_name = "strata";
  std::vector<std::string> dns_names = {"localhost"};
  std::vector<std::string> ip_addresses = {"127.0.0.1"};
  // URI SANs, e.g. "spiffe://strata/worker".
  std::vector<std::string> uris;
  absl::Duration validity = absl::Hours(24 * 365);
};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyCertSign) named `common_name`.
absl::StatusOr<PemKeyPair> MakeCertificateAuthority(const std::string& common_name,
                                                    absl::Duration validity);

// A leaf certificate for `spec`, signed by `ca`. InvalidArgument for a CA that does not parse or
// an IP address or URI that OpenSSL rejects.
absl::StatusOr<PemKeyPair> IssueLeafCertificate(const PemKeyPair& ca, const LeafSpec& spec);

// What a checked certificate says about itself, for logs.
struct CertificateSummary {
  std::string subject;            // "CN=strata,O=strata"
  std::vector<std::string> uris;  // URI SANs
  absl::Time not_after;
};

// Checks PEM texts as a process about to serve with them: `ca_pem` holds one or more CA
// certificates; `cert_pem` a leaf, optionally followed by intermediates; `key_pem` the leaf's
// private key. InvalidArgument with a one-line reason when a text does not parse, the key does
// not belong to the leaf, or the leaf does not chain to the CA now (expired, not yet valid,
// signed by another CA). Returns the leaf's summary.
absl::StatusOr<CertificateSummary> CheckCertificateChain(const std::string& ca_pem,
                                                         const std::string& cert_pem,
                                                         const std::string& key_pem);

// Writes `text` to `path` (created or truncated) with permission bits `mode` (0600 for keys).
absl::Status WritePrivateFile(const std::string& path, const std::string& text, int mode);

}  // namespace strata::proto
