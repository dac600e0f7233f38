// The by-name registry of eviction policies.
#include "strata/kvstore/eviction_policy.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "eviction_internal.h"

namespace strata::kvstore {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, EvictionPolicyFactory, std::less<>> factories ABSL_GUARDED_BY(mu);
};

// Built-ins are present from first use (see eviction_internal.h for why not self-registered).
Registry& GetRegistry() {
  static Registry* registry = [] {
    auto* r = new Registry;
    absl::MutexLock lock(&r->mu);
    r->factories.emplace("arc", internal::NewArcPolicy);
    r->factories.emplace("lru", internal::NewLruPolicy);
    r->factories.emplace("s3-fifo", internal::NewS3FifoPolicy);
    r->factories.emplace("w-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{});
    });
    r->factories.emplace("prefix-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{.prefix_aware = true});
    });
    r->factories.emplace("ghost-lru", [](int64_t capacity) {
      return internal::NewGhostPolicy(capacity, internal::GhostOptions{});
    });
    r->factories.emplace("adaptive-tinylfu", [](int64_t capacity) {
      return internal::NewTinyLfuPolicy(capacity, internal::TinyLfuOptions{.adaptive = true});
    });
    return r;
  }();
  return *registry;
}

}  // namespace

bool RegisterEvictionPolicy(std::string name, EvictionPolicyFactory factory) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  return r.factories.insert_or_assign(std::move(name), std::move(factory)).second;
}

std::vector<std::string> EvictionPolicyNames() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;  // std::map keeps them sorted
}

absl::StatusOr<std::unique_ptr<EvictionPolicy>> CreateEvictionPolicy(std::string_view name,
                                                                     int64_t capacity_blocks) {
  if (capacity_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eviction policy capacity must be positive, got ", capacity_blocks));
  }
  EvictionPolicyFactory factory;
  {
    Registry& r = GetRegistry();
    absl::MutexLock lock(&r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown eviction policy \"", std::string(name),
                     "\"; known: ", absl::StrJoin(EvictionPolicyNames(), ", ")));
  }
  std::unique_ptr<EvictionPolicy> policy = factory(capacity_blocks);
  if (policy == nullptr) {
    return absl::InternalError(
        absl::StrCat("eviction policy factory \"", std::string(name), "\" failed"));
  }
  return policy;
}

}  // namespace strata::kvstore
