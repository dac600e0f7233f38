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

}  // namespace strata::kvstore::internal
