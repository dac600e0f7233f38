#pragma once
// `strata up`'s cluster mTLS (the config's `tls`): makes a throwaway CA and certificate for one
// machine, or checks the given files, before any process starts.
#include "absl/status/status.h"
#include "strata/common/cluster_config.h"

namespace strata::cli {

// tls.mode off: nothing. auto: writes <log_dir>/tls/ca.crt, tls.crt and tls.key (a fresh CA
// and one certificate every process shares, the key readable by this user only) and fills in
// tls.ca/cert/key. files: checks that the key matches the certificate and that it chains to the
// CA now. Errors name the file and the reason.
absl::Status PrepareClusterTls(ClusterConfig& config);

}  // namespace strata::cli
