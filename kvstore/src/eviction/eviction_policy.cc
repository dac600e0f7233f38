// The by-name registry of eviction policies.
#include "strata/kvstore/eviction_policy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "eviction_internal.h"
#include "strata/common/registry.h"
#include "strata/common/status_macros.h"

namespace strata::kvstore {
namespace {

// Built-ins are present from first use (see eviction_internal.h for why not self-registered).
FactoryRegistry<EvictionPolicyFactory>& GetRegistry() {
  static auto* registry = [] {
    auto* r = new FactoryRegistry<EvictionPolicyFactory>("eviction policy");
    r->RegisterOrReplace("arc", internal::NewArcPolicy);
    r->RegisterOrReplace("lru", internal::NewLruPolicy);
    r->RegisterOrReplace("s3-fifo", internal::NewS3FifoPolicy);
    r->RegisterOrReplace("w-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{});
    });
    r->RegisterOrReplace("prefix-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{.prefix_aware = true});
    });
    r->RegisterOrReplace("ghost-lru", [](int64_t capacity) {
      return internal::NewGhostPolicy(capacity, internal::GhostOptions{});
    });
    r->RegisterOrReplace("adaptive-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{.adaptive = true});
    });
    return r;
  }();
  return *registry;
}

}  // namespace

bool RegisterEvictionPolicy(std::string name, EvictionPolicyFactory factory) {
  return GetRegistry().RegisterOrReplace(std::move(name), std::move(factory));
}

std::vector<std::string> EvictionPolicyNames() { return GetRegistry().Names(); }

absl::StatusOr<std::unique_ptr<EvictionPolicy>> CreateEvictionPolicy(std::string_view name,
                                                                     int64_t capacity_blocks) {
  if (capacity_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eviction policy capacity must be positive, got ", capacity_blocks));
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EvictionPolicy> policy,
                          GetRegistry().Create(name, capacity_blocks));
  if (policy == nullptr) {
    return absl::InternalError(
        absl::StrCat("eviction policy factory \"", std::string(name), "\" failed"));
  }
  return policy;
}

}  // namespace strata::kvstore
