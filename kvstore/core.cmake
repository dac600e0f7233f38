# strata::kvstore — the tier contract, G2 host tier, eviction policies, TieredStore.
strata_cc_library(NAME kvstore
  SRCS src/tier.cc
       src/eviction_policy.cc src/eviction_lru.cc src/eviction_s3fifo.cc src/eviction_arc.cc
       src/eviction_tinylfu.cc src/eviction_ghost.cc
       src/host_tier.cc src/host_tier_pool.cc
       src/tiered_store.cc src/tiered_store_parts.cc
  DEPS strata::common absl::status absl::statusor absl::synchronization absl::strings
       absl::flat_hash_map absl::time PkgConfig::XXHASH)
