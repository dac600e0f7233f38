# strata::kvstore_remote — G4's client tier (RemoteTier: rendezvous placement over `strata
# kvstore` daemons, UCX transfers, checksums verified on read).
strata_cc_library(NAME kvstore_remote
  SRCS src/remote/remote_daemon.cc src/remote/remote_tier.cc src/remote/remote_tier_read.cc
  DEPS strata::kvstore strata::transport strata::proto strata::common
       absl::status absl::statusor absl::synchronization absl::flat_hash_map absl::flat_hash_set
       absl::strings absl::time PkgConfig::XXHASH)
