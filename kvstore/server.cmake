# strata::kvstore_server — the `strata kvstore` daemon, G4's far end (KvStoreServer: gRPC
# KvStore service, a HostTier pool in transport memory, metrics, router registration).
strata_cc_library(NAME kvstore_server
  SRCS src/server/server_impl.cc src/server/server_pool.cc src/server/server_service.cc
  DEPS strata::kvstore strata::transport strata::proto strata::http strata::common
       absl::status absl::statusor absl::synchronization absl::flat_hash_map absl::strings
       absl::time)
