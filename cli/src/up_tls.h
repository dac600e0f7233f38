#pragma once
// `strata up`'s cluster mTLS (the config's `tls`) and the router's HTTPS (`router.http_tls`):
// makes a throwaway CA and certificate for one machine, or checks the given files, before any
// process starts.
#include "absl/status/status.h"
#include "strata/common/cluster_config.h"

namespace strata::cli {

// tls.mode off: nothing. auto: writes <log_dir>/tls/ca.crt, tls.crt and tls.key (a fresh CA
// and one certificate every process shares, the key readable by this user only) and fills in
// tls.ca/cert/key. files: checks that the key matches the certificate and that it chains to the
// CA now. Errors name the file and the reason.
absl::Status PrepareClusterTls(ClusterConfig& config);

// router.http_tls auto (after PrepareClusterTls): the certificate of `tls: auto` when there is
// one, else a throwaway CA and certificate of its own (<log_dir>/tls/http-ca.crt, http-tls.crt,
// http-tls.key); fills in http_tls.ca (what clients trust), cert and key. Other modes: nothing.
absl::Status PrepareRouterHttpTls(ClusterConfig& config);

}  // namespace strata::cli
