#include "strata/kvstore/tiering_policy.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "strata/kvstore/tiered_store.h"

namespace strata::kvstore {

absl::StatusOr<OffloadMode> ParseOffloadMode(std::string_view name) {
  if (name == "write-back") return OffloadMode::kWriteBack;
  if (name == "write-through") return OffloadMode::kWriteThrough;
  return absl::InvalidArgumentError(absl::StrCat("unknown offload mode \"", std::string(name),
                                                 "\"; known: write-back, write-through"));
}

int PlanFetch(const FetchPolicy& policy, const FetchCandidate& c,
              const std::function<TierCost(TierKind)>& cost) {
  double rate = c.prefill_tokens_per_second;
  if (rate <= 0) rate = policy.default_prefill_tokens_per_second;
  // Per tier, blocks fetched so far in the prefix [0, k); a run from several tiers costs one
  // fetch call per tier involved.
  absl::flat_hash_map<int, int64_t> per_tier;
  int best = 0;
  double best_saving = 0;
  for (size_t k = 0; k < c.located.size(); ++k) {
    ++per_tier[static_cast<int>(c.located[k])];
    double fetch = 0;
    for (const auto& [tier, blocks] : per_tier) {
      fetch += cost(static_cast<TierKind>(tier)).Seconds(blocks, c.block_bytes);
    }
    const double compute = static_cast<double>((k + 1) * c.block_tokens) / rate;
    const double saving = compute * policy.fetch_margin - fetch;
    if (saving > best_saving) {
      best_saving = saving;
      best = static_cast<int>(k + 1);
    }
  }
  return static_cast<int>(std::min<int64_t>(best, std::max<int64_t>(1, c.host_blocks / 2)));
}

int PlanFetch(const FetchPolicy& policy, TieredStore& store, std::span<const TierKind> located,
              int block_tokens, double prefill_tokens_per_second) {
  const FetchCandidate c{
      .located = located,
      .block_tokens = block_tokens,
      .block_bytes = store.block_bytes(),
      .host_blocks = store.tier(TierKind::kHost)->usage().capacity_bytes /
                     static_cast<int64_t>(store.block_bytes()),
      .prefill_tokens_per_second = prefill_tokens_per_second,
  };
  return PlanFetch(policy, c, [&store](TierKind kind) { return store.cost(kind); });
}

std::optional<std::vector<std::string>> KvstoreDiscovery::Update(
    const std::vector<std::string>& listed, absl::Time now) {
  for (const std::string& address : listed) last_listed_[address] = now;
  std::vector<std::string> use;
  for (auto it = last_listed_.begin(); it != last_listed_.end();) {
    if (now - it->second > grace_) {
      it = last_listed_.erase(it);
      continue;
    }
    use.push_back(it->first);
    ++it;
  }
  if (current_ == use) return std::nullopt;
  current_ = use;
  return use;
}

}  // namespace strata::kvstore
