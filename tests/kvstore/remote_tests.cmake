# G4: the kvstore daemon and its client tier (kvstore/remote.cmake, kvstore/server.cmake).
# In one process over real gRPC + UCX on loopback.
strata_cc_test(NAME kvstore_remote_test
  SRCS remote_tier_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server
  LABELS kvstore)
# Daemons as child processes of the `strata` binary (SIGKILL, restart, SIGTERM, CLI errors).
strata_cc_test(NAME kvstore_remote_process_test
  SRCS remote_process_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server
  LABELS kvstore)
add_dependencies(kvstore_remote_process_test strata)
# Registration with the router's registry and KV events at tier 3.
strata_cc_test(NAME kvstore_remote_router_test
  SRCS remote_router_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server strata::router
  LABELS kvstore)
# Block hashes in separate processes and network namespaces.
add_executable(kvstore_remote_hash_probe remote_hash_probe.cc)
target_link_libraries(kvstore_remote_hash_probe PRIVATE strata::common strata::build_flags)
strata_cc_test(NAME kvstore_remote_netns_test
  SRCS remote_netns_test.cc
  DEPS strata::common
  LABELS kvstore)
add_dependencies(kvstore_remote_netns_test kvstore_remote_hash_probe)
# The registered-buffer path (RegisterRegion: no staging copy) and its fallback.
strata_cc_test(NAME kvstore_remote_registered_test
  SRCS remote_registered_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server
  LABELS kvstore)
# TieredStore with a real G4: prefetches land straight in G2 pool slots (registered memory).
strata_cc_test(NAME kvstore_remote_tiered_test
  SRCS remote_tiered_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server absl::synchronization
  LABELS kvstore)
# Puts pipelined piece by piece: many pieces, few lanes, several daemons, TCP, a full daemon
# and a failed piece mid-run (through a gRPC proxy that poisons one ReserveWrite).
strata_cc_test(NAME kvstore_remote_pipeline_test
  SRCS remote_pipeline_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server
  LABELS kvstore)
# Daemons joining and leaving a client's remote tier at run time.
strata_cc_test(NAME kvstore_remote_membership_test
  SRCS remote_membership_test.cc
  DEPS strata::kvstore_remote strata::kvstore_server
  LABELS kvstore)
