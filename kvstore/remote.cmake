# strata::kvstore_remote — G4: the `strata kvstore` daemon (KvStoreServer: gRPC KvStore service,
# a HostTier pool in transport memory, metrics, router registration) and its client tier
# (RemoteTier: rendezvous placement over daemons, UCX transfers, checksums verified on read).
strata_cc_library(NAME kvstore_remote
  SRCS src/server_impl.cc src/server_pool.cc src/server_service.cc
       src/remote_daemon.cc src/remote_tier.cc src/remote_tier_read.cc
  DEPS strata::kvstore strata::transport strata::proto strata::http strata::common
       absl::status absl::statusor absl::synchronization absl::flat_hash_map absl::flat_hash_set absl::strings
       absl::time PkgConfig::XXHASH)
