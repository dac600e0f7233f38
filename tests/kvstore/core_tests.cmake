# Tests of the kvstore core: eviction policies, the use sketch, the G2 host tier, TieredStore.
strata_cc_test(NAME kvstore_eviction_policy_test SRCS eviction_policy_test.cc
  DEPS strata::kvstore)
strata_cc_test(NAME kvstore_count_min_sketch_test SRCS count_min_sketch_test.cc
  DEPS strata::kvstore_eviction)
strata_cc_test(NAME kvstore_host_tier_test SRCS host_tier_test.cc
  DEPS strata::kvstore absl::synchronization)
# host_tier_internal.h (the chunked checksumming copy) is tested against BlockChecksum.
target_include_directories(kvstore_host_tier_test PRIVATE ${PROJECT_SOURCE_DIR}/kvstore/src/core)
strata_cc_test(NAME kvstore_tiered_store_test SRCS tiered_store_test.cc
  DEPS strata::kvstore absl::synchronization)
# The tiering policy (tiering_policy.h): fetch or recompute, offload modes, G4 discovery.
strata_cc_test(NAME kvstore_tiering_policy_test SRCS tiering_policy_test.cc
  DEPS strata::kvstore)
