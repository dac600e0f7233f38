# strata::kvstore — the tier contract, G2 host tier, TieredStore, the tiering policy
# (tiering_policy.h).
strata_cc_library(NAME kvstore
  SRCS src/core/tier.cc
       src/core/host_tier.cc src/core/host_tier_pool.cc src/core/host_memory.cc
       src/core/tiered_store.cc src/core/tiered_store_parts.cc src/core/tiering_policy.cc
  DEPS strata::kvstore_eviction strata::common absl::status absl::statusor
       absl::synchronization absl::strings absl::flat_hash_map absl::time PkgConfig::XXHASH)
