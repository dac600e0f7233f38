#pragma once
// The built-in eviction policies, constructed by the registry (eviction_policy.cc). They are
// named here rather than self-registered from their own files so that linking strata::kvstore
// statically can never drop them (an unreferenced object's static initializers do not run).
#include <cstdint>
#include <memory>

#include "strata/kvstore/eviction_policy.h"

namespace strata::kvstore::internal {

std::unique_ptr<EvictionPolicy> NewLruPolicy(int64_t capacity_blocks);
std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(int64_t capacity_blocks);
std::unique_ptr<EvictionPolicy> NewArcPolicy(int64_t capacity_blocks);

// W-TinyLFU (eviction_tinylfu.cc). With `prefix_aware`, keys whose parent block left the tier
// (orphans: unusable as a prefix) are evicted before anything else.
struct TinyLfuOptions {
  double window_fraction = 0.01;   // share of capacity in the admission window (>= 1 block)
  double protected_fraction = 0.8;  // share of the main area kept for keys used twice
  int64_t sample_factor = 10;       // the sketch halves its counts every factor*capacity uses
  bool prefix_aware = false;
};
std::unique_ptr<EvictionPolicy> NewTinyLfuPolicy(int64_t capacity_blocks,
                                                 const TinyLfuOptions& options);

}  // namespace strata::kvstore::internal
