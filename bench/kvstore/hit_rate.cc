// Prefix-cache hit rate of the eviction policies on a Mooncake trace, against Belady's offline
// optimum computed on the same access sequence.
//
//   kvstore_hit_rate [--policies=a,b,...] [trace.jsonl] [sizes...]
//   (default trace ../shared/traces/mooncake_conversation.jsonl; default policies lru, s3-fifo,
//   arc, w-tinylfu, prefix-tinylfu, adaptive-tinylfu, ghost-lru)
//
// Every hash id is one 512-token block; hash ids are prefix-chained, so the parent of
// hash_ids[j] is hash_ids[j-1] (passed to the policy through InsertChild). Requests are
// replayed in file order; each request first counts its longest cached prefix (the blocks an
// engine could reuse: a block counts only if every block before it in the request is cached
// too), then accesses all its blocks in order (a hit refreshes, a miss inserts, evicting by the
// policy when full).
//   block hit rate  = hits / accesses (what Belady's MIN maximizes)
//   prefix hit rate = sum of cached-prefix lengths / accesses (what saves prefill)
// Belady: on a miss the block is inserted and, when over capacity, the cached block whose next
// use is farthest (possibly the new one) is evicted — the optimum for block hit rate.
// A two-level run models G1 (LRU, N1 blocks) in front of G2 (policy, N2 blocks): G1 misses are
// looked up in G2, G1 evictions are offloaded into G2 (write-back), as TieredStore does.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "strata/kvstore/eviction_policy.h"
#include "strata/replay/trace.h"

namespace strata::kvstore {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

class Cache {
 public:
  virtual ~Cache() = default;
  virtual bool Contains(uint64_t key) const = 0;
  // Accesses `key` (whose prefix parent is `parent`, none for a request's first block) at
  // position `pos` of the trace's access sequence; true on a hit.
  virtual bool Access(uint64_t key, std::optional<uint64_t> parent, int64_t pos) = 0;
};

// A cache of `capacity` blocks run by an EvictionPolicy, the way a tier runs it.
class PolicyCache final : public Cache {
 public:
  PolicyCache(const std::string& policy, int64_t capacity)
      : policy_(std::move(CreateEvictionPolicy(policy, capacity)).value()), capacity_(capacity) {}
  bool Contains(uint64_t key) const override { return present_.contains(key); }
  bool Access(uint64_t key, std::optional<uint64_t> parent, int64_t) override {
    if (present_.contains(key)) {
      policy_->Touch(key);
      return true;
    }
    Insert(key, parent);
    return false;
  }
  // Inserts an absent key (or touches a present one); returns the evicted key if any.
  std::optional<uint64_t> Insert(uint64_t key, std::optional<uint64_t> parent) {
    if (present_.contains(key)) {
      policy_->Touch(key);
      return std::nullopt;
    }
    std::optional<uint64_t> evicted;
    if (static_cast<int64_t>(present_.size()) >= capacity_) {
      evicted = policy_->Victim([](BlockHash) { return true; });
      policy_->Erase(*evicted);
      present_.erase(*evicted);
    }
    if (parent.has_value()) {
      policy_->InsertChild(key, *parent);
    } else {
      policy_->Insert(key);
    }
    present_.insert(key);
    return evicted;
  }

 private:
  std::unique_ptr<EvictionPolicy> policy_;
  int64_t capacity_;
  absl::flat_hash_set<uint64_t> present_;
};

class BeladyCache final : public Cache {
 public:
  BeladyCache(const std::vector<int64_t>& next_use, int64_t capacity)
      : next_use_(next_use), capacity_(capacity) {}
  bool Contains(uint64_t key) const override { return next_.contains(key); }
  bool Access(uint64_t key, std::optional<uint64_t>, int64_t pos) override {
    const int64_t nu = next_use_[pos];
    auto it = next_.find(key);
    const bool hit = it != next_.end();
    if (hit) {
      by_next_.erase({it->second, key});
      it->second = nu;
    } else {
      next_.emplace(key, nu);
    }
    by_next_.insert({nu, key});
    if (static_cast<int64_t>(next_.size()) > capacity_) {
      auto farthest = std::prev(by_next_.end());
      next_.erase(farthest->second);
      by_next_.erase(farthest);
    }
    return hit;
  }

 private:
  const std::vector<int64_t>& next_use_;
  int64_t capacity_;
  absl::flat_hash_map<uint64_t, int64_t> next_;
  std::set<std::pair<int64_t, uint64_t>> by_next_;
};

// G1 (LRU) backed by G2 (`policy`): hits in either count.
class TwoLevelCache final : public Cache {
 public:
  TwoLevelCache(const std::string& policy, int64_t g1, int64_t g2)
      : g1_("lru", g1), g2_(policy, g2) {}
  bool Contains(uint64_t key) const override { return g1_.Contains(key) || g2_.Contains(key); }
  bool Access(uint64_t key, std::optional<uint64_t> parent, int64_t pos) override {
    if (parent.has_value()) parent_.insert_or_assign(key, *parent);
    if (g1_.Contains(key)) return g1_.Access(key, parent, pos);
    const bool g2_hit = g2_.Contains(key);
    if (g2_hit) g2_.Access(key, parent, pos);  // a G2 read is a use
    if (std::optional<uint64_t> evicted = g1_.Insert(key, parent)) {  // offload
      auto p = parent_.find(*evicted);
      g2_.Insert(*evicted, p == parent_.end() ? std::nullopt : std::optional(p->second));
    }
    return g2_hit;
  }

 private:
  absl::flat_hash_map<uint64_t, uint64_t> parent_;  // of every key seen
  PolicyCache g1_;
  PolicyCache g2_;
};

struct Result {
  int64_t accesses = 0;
  int64_t hits = 0;
  int64_t prefix_hits = 0;
  double hit_rate() const { return static_cast<double>(hits) / static_cast<double>(accesses); }
  double prefix_rate() const {
    return static_cast<double>(prefix_hits) / static_cast<double>(accesses);
  }
};

Result Simulate(Cache& cache, const std::vector<replay::TraceRequest>& trace) {
  Result r;
  for (const replay::TraceRequest& req : trace) {
    for (uint64_t key : req.block_ids) {
      if (!cache.Contains(key)) break;
      ++r.prefix_hits;
    }
    std::optional<uint64_t> parent;
    for (uint64_t key : req.block_ids) {
      r.hits += cache.Access(key, parent, r.accesses++);
      parent = key;
    }
  }
  return r;
}

std::vector<int64_t> NextUses(const std::vector<replay::TraceRequest>& trace) {
  std::vector<uint64_t> seq;
  for (const auto& req : trace) seq.insert(seq.end(), req.block_ids.begin(), req.block_ids.end());
  std::vector<int64_t> next(seq.size(), kNever);
  absl::flat_hash_map<uint64_t, int64_t> last;
  for (int64_t i = static_cast<int64_t>(seq.size()) - 1; i >= 0; --i) {
    auto [it, inserted] = last.try_emplace(seq[i], i);
    if (!inserted) {
      next[i] = it->second;
      it->second = i;
    }
  }
  return next;
}

// Block hit rate of an offline *static* choice: the `capacity` blocks with the most accesses
// over the whole trace, cached from their first access and never evicted. It knows every
// block's future frequency but not when the uses come; an online frequency policy cannot beat
// it by much, which is why the small sizes stay far from Belady.
double StaticTopHitRate(const std::vector<replay::TraceRequest>& trace, int64_t capacity) {
  absl::flat_hash_map<uint64_t, int64_t> count;
  int64_t accesses = 0;
  for (const auto& req : trace) {
    for (uint64_t key : req.block_ids) ++count[key];
    accesses += static_cast<int64_t>(req.block_ids.size());
  }
  std::vector<int64_t> counts;
  for (const auto& [key, c] : count) counts.push_back(c);
  const auto top = std::min<size_t>(counts.size(), static_cast<size_t>(capacity));
  std::partial_sort(counts.begin(), counts.begin() + top, counts.end(), std::greater<>());
  int64_t hits = 0;
  for (size_t i = 0; i < top; ++i) hits += counts[i] - 1;  // the first access always misses
  return static_cast<double>(hits) / static_cast<double>(accesses);
}

// Share of accesses whose previous access to the same block is at most `capacity` accesses
// earlier: a loose bound on what recency alone can catch with that many blocks.
double ShortReuseShare(const std::vector<int64_t>& next_use, int64_t capacity) {
  int64_t n = 0;
  for (size_t i = 0; i < next_use.size(); ++i) {
    n += next_use[i] != kNever && next_use[i] - static_cast<int64_t>(i) <= capacity;
  }
  return static_cast<double>(n) / static_cast<double>(next_use.size());
}

void PrintRow(const std::string& size, const std::string& policy, const Result& r,
              const Result& opt) {
  std::printf("| %s | %s | %.4f | %.4f | %.3f | %.3f |\n", size.c_str(), policy.c_str(),
              r.hit_rate(), r.prefix_rate(), r.hit_rate() / opt.hit_rate(),
              r.prefix_rate() / opt.prefix_rate());
}

int Main(int argc, char** argv) {
  std::vector<std::string> policies = {"lru",           "s3-fifo",        "arc",
                                       "w-tinylfu",     "prefix-tinylfu", "adaptive-tinylfu",
                                       "ghost-lru"};
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--policies=")) {
      policies = absl::StrSplit(std::string(argv[i]).substr(11), ',', absl::SkipEmpty());
    } else {
      args.push_back(argv[i]);
    }
  }
  const std::string path =
      !args.empty() ? args[0] : "../shared/traces/mooncake_conversation.jsonl";
  std::vector<int64_t> sizes;
  for (size_t i = 1; i < args.size(); ++i) sizes.push_back(std::atoll(args[i].c_str()));
  if (sizes.empty()) sizes = {1024, 4096, 16384, 65536};
  absl::StatusOr<std::vector<replay::TraceRequest>> trace = replay::LoadTrace(path);
  if (!trace.ok()) {
    std::fprintf(stderr, "%s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  const std::vector<int64_t> next_use = NextUses(*trace);
  absl::flat_hash_set<uint64_t> unique;
  for (const auto& req : *trace) unique.insert(req.block_ids.begin(), req.block_ids.end());
  std::printf(
      "trace %s: %zu requests, %zu block accesses, %zu distinct blocks "
      "(no cache can hit more than %.4f)\n\n",
      path.c_str(), trace->size(), next_use.size(), unique.size(),
      1.0 - static_cast<double>(unique.size()) / static_cast<double>(next_use.size()));
  std::printf(
      "| blocks | policy | block hit rate | prefix hit rate | hit / Belady | prefix / Belady |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int64_t n : sizes) {
    BeladyCache belady(next_use, n);
    const Result opt = Simulate(belady, *trace);
    for (const std::string& policy : policies) {
      PolicyCache cache(policy, n);
      PrintRow(std::to_string(n), policy, Simulate(cache, *trace), opt);
    }
    PrintRow(std::to_string(n), "belady", opt, opt);
    const double top = StaticTopHitRate(*trace, n);
    const double short_reuse = ShortReuseShare(next_use, n);
    std::printf("| %lld | static top-N (offline) | %.4f | - | %.3f | - |\n",
                static_cast<long long>(n), top, top / opt.hit_rate());
    std::printf("| %lld | reuse distance <= N | %.4f | - | %.3f | - |\n",
                static_cast<long long>(n), short_reuse, short_reuse / opt.hit_rate());
  }
  std::printf(
      "\nTwo levels: G1 LRU of N1 blocks, write-back into G2 of N2 blocks; Belady of "
      "N1+N2 blocks as the bound.\n\n");
  std::printf(
      "| G1+G2 blocks | G2 policy | block hit rate | prefix hit rate | hit / Belady | "
      "prefix / Belady |\n|---|---|---|---|---|---|\n");
  for (auto [g1, g2] : std::vector<std::pair<int64_t, int64_t>>{
           {1024, 4096}, {1024, 16384}, {4096, 16384}, {4096, 65536}}) {
    BeladyCache belady(next_use, g1 + g2);
    const Result opt = Simulate(belady, *trace);
    for (const std::string& policy : policies) {
      TwoLevelCache cache(policy, g1, g2);
      PrintRow(absl::StrFormat("%d+%d", g1, g2), policy, Simulate(cache, *trace), opt);
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata::kvstore

int main(int argc, char** argv) { return strata::kvstore::Main(argc, argv); }
