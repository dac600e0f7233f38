# strata::kvstore_eviction — eviction policies by name (eviction_policy.h) and the count-min
# sketch of recent use that the frequency-based ones and TieredStore's disk admission share.
strata_cc_library(NAME kvstore_eviction
  SRCS src/eviction/eviction_policy.cc src/eviction/eviction_lru.cc
       src/eviction/eviction_s3fifo.cc src/eviction/eviction_arc.cc
       src/eviction/eviction_tinylfu.cc src/eviction/eviction_ghost.cc
       src/eviction/count_min_sketch.cc
  DEPS strata::common absl::status absl::statusor absl::synchronization absl::strings
       absl::flat_hash_map absl::flat_hash_set)
