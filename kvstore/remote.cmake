# strata::kvstore_remote — G4: the `strata kvstore` daemon (KvStoreServer: gRPC KvStore service,
# a HostTier pool in transport memory, metrics, router registration) and its client tier
# (RemoteTier: rendezvous placement over daemons, UCX transfers, checksums verified on read).
strata_cc_library(NAME kvstore_remote
  SRCS src/server_impl.cc src/server_pool.cc src/server_service.cc
       src/remote_daemon.cc src/remote_tier.cc src/remote_tier_read.cc
  DEPS strata::kvstore strata::transport strata::proto strata::http strata::common
       absl::status absl::statusor absl::synchronization absl::flat_hash_map absl::strings
       absl::time PkgConfig::XXHASH)
# `strata kvstore` (cli/src/cmd_kvstore.cc) needs this library in the `strata` binary, which is
# defined later (cli/); link it once the whole tree is configured.
if(NOT COMMAND strata_link_kvstore_remote)
  function(strata_link_kvstore_remote)
    if(TARGET strata)
      target_link_libraries(strata PRIVATE strata::kvstore_remote)
    endif()
  endfunction()
endif()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL strata_link_kvstore_remote)
