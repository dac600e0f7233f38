// "w-tinylfu" and "prefix-tinylfu": W-TinyLFU (Einziger, Friedman & Manes, "TinyLFU: A Highly
// Efficient Cache Admission Policy", ACM ToS 2017), with an optional prefix-aware rule.
//
// Layout: a small LRU *window* (about 1% of capacity) where new keys enter, and a *main* area
// run as segmented LRU: *probation* (keys not used since they reached main) and *protected*
// (keys used again, about 80% of main). A count-min sketch estimates how often every key was
// inserted or touched recently (4-bit counters, halved every sample_factor * capacity uses, so
// old popularity fades). When the window is full and main is full, the window's oldest key is
// the *candidate* and probation's oldest key the *main victim*: the candidate enters main only
// if its estimated frequency is strictly higher, and the loser is the victim. A block used once
// therefore cannot displace a block used several times, which is what a KV cache of prompts
// that share system and conversation prefixes needs (most blocks are never used again).
//
// Prefix-aware ("prefix-tinylfu"): keys inserted with InsertChild know their parent block. A
// block is only reusable while its whole prefix is cached, so when a key leaves the tier its
// cached children become *orphans*, and orphans are evicted (oldest first) before any other
// key; evicting an orphan orphans its own children in turn. An orphan that is touched (its
// prefix was recomputed and is present again) goes back to probation.
#include <algorithm>
#include <array>
#include <cmath>
#include <list>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "eviction_internal.h"
#include "strata/kvstore/count_min_sketch.h"

namespace strata::kvstore::internal {
namespace {

// Frequencies up to 15, halved every sample_factor * capacity uses (at least 16).
CountMinSketch::Options SketchOptions(int64_t capacity, int64_t sample_factor) {
  return {.width = std::max<uint64_t>(64, static_cast<uint64_t>(capacity) * 4),
          .max_count = 15,
          .age_every = std::max<int64_t>(16, sample_factor * capacity),
          .halve_additions = true};
}

enum class Queue : uint8_t { kWindow, kProbation, kProtected, kOrphan };

class TinyLfuPolicy final : public EvictionPolicy {
 public:
  TinyLfuPolicy(int64_t capacity, const TinyLfuOptions& options)
      : prefix_aware_(options.prefix_aware),
        adaptive_(options.adaptive),
        capacity_(capacity),
        protected_fraction_(options.protected_fraction),
        sketch_(SketchOptions(capacity, options.sample_factor)),
        climber_(capacity, options.adapt_period) {
    SetWindow(static_cast<int64_t>(std::llround(options.window_fraction * capacity)));
  }

  std::string_view name() const override {
    if (adaptive_) return prefix_aware_ ? "prefix-adaptive-tinylfu" : "adaptive-tinylfu";
    return prefix_aware_ ? "prefix-tinylfu" : "w-tinylfu";
  }

  void Insert(BlockHash key) override { Add(key, std::nullopt); }
  void InsertChild(BlockHash key, BlockHash parent) override { Add(key, parent); }

  void Touch(BlockHash key) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Sample(/*hit=*/true);
    sketch_.Add(key);
    switch (it->second.queue) {
      case Queue::kWindow:
      case Queue::kProtected:
        MoveTo(it->second, it->second.queue);
        break;
      case Queue::kProbation:
        MoveTo(it->second, Queue::kProtected);
        if (static_cast<int64_t>(protected_.size()) > protected_cap_) {
          MoveTo(entries_.at(protected_.back()), Queue::kProbation);
        }
        break;
      case Queue::kOrphan:
        MoveTo(it->second, Queue::kProbation);
        break;
    }
  }

  void Erase(BlockHash key) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Entry entry = it->second;
    ListOf(entry.queue).erase(entry.pos);
    entries_.erase(it);
    if (!prefix_aware_) return;
    if (entry.parent.has_value()) {
      auto siblings = children_.find(*entry.parent);
      if (siblings != children_.end()) {
        siblings->second.erase(key);
        if (siblings->second.empty()) children_.erase(siblings);
      }
    }
    auto kids = children_.find(key);
    if (kids == children_.end()) return;
    for (BlockHash child : kids->second) {
      Entry& e = entries_.at(child);
      if (e.queue != Queue::kOrphan) MoveTo(e, Queue::kOrphan);
    }
  }

  std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) override {
    if (prefix_aware_) {
      if (auto orphan = OldestEvictable(orphan_, evictable)) return orphan;
    }
    std::optional<BlockHash> from_main = MainVictim(evictable);
    const bool window_full = static_cast<int64_t>(window_.size()) >= window_cap_;
    if (!window_full && from_main.has_value()) return from_main;
    std::optional<BlockHash> candidate = OldestEvictable(window_, evictable);
    if (!candidate.has_value() || !from_main.has_value()) {
      return candidate.has_value() ? candidate : from_main;
    }
    // The admission duel: the candidate moves to main only if it is strictly more popular.
    if (sketch_.Estimate(*candidate) > sketch_.Estimate(*from_main)) {
      MoveTo(entries_.at(*candidate), Queue::kProbation);
      return from_main;
    }
    return candidate;
  }

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Entry {
    Queue queue;
    std::list<BlockHash>::iterator pos;
    std::optional<BlockHash> parent;
  };

  std::list<BlockHash>& ListOf(Queue q) {
    switch (q) {
      case Queue::kWindow:
        return window_;
      case Queue::kProbation:
        return probation_;
      case Queue::kProtected:
        return protected_;
      case Queue::kOrphan:
        break;
    }
    return orphan_;
  }

  // Moves the entry to the most recent end of `to` (iterators survive splice).
  void MoveTo(Entry& entry, Queue to) {
    std::list<BlockHash>& dst = ListOf(to);
    dst.splice(dst.begin(), ListOf(entry.queue), entry.pos);
    entry.queue = to;
  }

  void Add(BlockHash key, std::optional<BlockHash> parent) {
    if (entries_.contains(key)) return Touch(key);
    Sample(/*hit=*/false);
    sketch_.Add(key);
    Queue queue = Queue::kWindow;
    if (prefix_aware_ && parent.has_value()) {
      children_[*parent].insert(key);
      if (!entries_.contains(*parent)) queue = Queue::kOrphan;  // its prefix is already gone
    } else {
      parent.reset();
    }
    std::list<BlockHash>& dst = ListOf(queue);
    dst.push_front(key);
    entries_.emplace(key, Entry{queue, dst.begin(), parent});
    // While main has room (warm-up, or after explicit erases) the window spills into it freely.
    while (static_cast<int64_t>(window_.size()) > window_cap_ &&
           static_cast<int64_t>(probation_.size() + protected_.size()) < main_cap_) {
      MoveTo(entries_.at(window_.back()), Queue::kProbation);
    }
  }

  // Window and main shares; the queues follow lazily (Victim evicts from whichever area is
  // over its share, Touch trims protected).
  void SetWindow(int64_t window) {
    window_cap_ = std::clamp<int64_t>(window, 1, std::max<int64_t>(1, capacity_ - 1));
    main_cap_ = capacity_ - window_cap_;
    protected_cap_ = static_cast<int64_t>(protected_fraction_ * static_cast<double>(main_cap_));
  }

  // One access for the hill climber (adaptive only).
  void Sample(bool hit) {
    if (!adaptive_) return;
    if (std::optional<int64_t> next = climber_.Record(hit, window_cap_)) SetWindow(*next);
  }

  std::optional<BlockHash> MainVictim(const std::function<bool(BlockHash)>& evictable) {
    if (auto v = OldestEvictable(probation_, evictable)) return v;
    return OldestEvictable(protected_, evictable);
  }

  const bool prefix_aware_;
  const bool adaptive_;
  const int64_t capacity_;
  const double protected_fraction_;
  int64_t window_cap_ = 1;
  int64_t main_cap_ = 0;
  int64_t protected_cap_ = 0;
  CountMinSketch sketch_;
  WindowClimber climber_;
  std::list<BlockHash> window_, probation_, protected_, orphan_;
  absl::flat_hash_map<BlockHash, Entry> entries_;
  // Cached children of every parent that has any (prefix-aware only); kept while the parent
  // is absent, so a child inserted after its parent left is still found.
  absl::flat_hash_map<BlockHash, absl::flat_hash_set<BlockHash>> children_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewTinyLfuPolicy(int64_t capacity_blocks,
                                                 const TinyLfuOptions& options) {
  return std::make_unique<TinyLfuPolicy>(capacity_blocks, options);
}

}  // namespace strata::kvstore::internal
