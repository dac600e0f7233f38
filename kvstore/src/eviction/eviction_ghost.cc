// "ghost-lru": windowed LRU with ghost-list admission and a hill-climbed window.
//
// Why: on prompt-prefix traces most blocks are used once (63% of the accesses of the Mooncake
// conversation trace go to blocks never seen again), but a block seen twice is likely to come
// back. New keys enter a small LRU *window*; when the window is over its share, its oldest key
// is the candidate: if the key is in the *ghost* list (it was evicted recently, from either
// area, and has come back), it is admitted to the *main* LRU; otherwise it is evicted and its
// key remembered in the ghost. So a block needs two uses within about ghost_factor x capacity
// distinct misses to displace main's blocks, and a scan only churns the window. The ghost
// holds keys only (a few dozen bytes each, against a block of megabytes).
//
// A large cache wants the opposite (the next conversation turn reuses blocks seen once, so
// plain LRU is near optimal there): the window share is hill-climbed on the measured hit rate
// (WindowClimber); a window of almost the whole capacity behaves like LRU.
#include <list>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "eviction_internal.h"

namespace strata::kvstore::internal {
namespace {

class GhostPolicy final : public EvictionPolicy {
 public:
  GhostPolicy(int64_t capacity, const GhostOptions& options)
      : capacity_(capacity),
        ghost_cap_(std::max<int64_t>(1, options.ghost_factor * capacity)),
        adaptive_(options.adaptive),
        climber_(capacity, options.adapt_period) {
    SetWindow(static_cast<int64_t>(std::llround(options.window_fraction * capacity)));
  }

  std::string_view name() const override { return "ghost-lru"; }

  void Insert(BlockHash key) override {
    if (entries_.contains(key)) return Touch(key);
    Sample(/*hit=*/false);
    window_.push_front(key);
    entries_.emplace(key, Entry{true, window_.begin()});
  }

  void Touch(BlockHash key) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Sample(/*hit=*/true);
    std::list<BlockHash>& list = it->second.in_window ? window_ : main_;
    list.splice(list.begin(), list, it->second.pos);
  }

  void Erase(BlockHash key) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    (it->second.in_window ? window_ : main_).erase(it->second.pos);
    entries_.erase(it);
  }

  std::optional<BlockHash> Victim(const std::function<bool(BlockHash)>& evictable) override {
    // Each round either returns or admits one window key to main, so it ends.
    while (true) {
      const bool window_over = static_cast<int64_t>(window_.size()) >= window_cap_;
      std::optional<BlockHash> candidate = window_over ? OldestEvictable(window_, evictable) : std::nullopt;
      if (!candidate.has_value()) {
        std::optional<BlockHash> v = OldestEvictable(main_, evictable);
        if (!v.has_value()) v = OldestEvictable(window_, evictable);
        if (v.has_value()) Remember(*v);
        return v;
      }
      if (!ForgetGhost(*candidate)) {
        Remember(*candidate);
        return candidate;
      }
      Entry& e = entries_.at(*candidate);  // seen before: admit it
      main_.splice(main_.begin(), window_, e.pos);
      e.in_window = false;
    }
  }

  int64_t size() const override { return static_cast<int64_t>(entries_.size()); }

 private:
  struct Entry {
    bool in_window;
    std::list<BlockHash>::iterator pos;
  };

  void SetWindow(int64_t window) {
    window_cap_ = std::clamp<int64_t>(window, 1, std::max<int64_t>(1, capacity_ - 1));
  }

  void Sample(bool hit) {
    if (!adaptive_) return;
    if (std::optional<int64_t> next = climber_.Record(hit, window_cap_)) SetWindow(*next);
  }

  // Adds an evicted key to the ghost (oldest ghosts drop out beyond ghost_cap_).
  void Remember(BlockHash key) {
    if (ghost_index_.contains(key)) return;
    ghost_.push_front(key);
    ghost_index_.emplace(key, ghost_.begin());
    if (static_cast<int64_t>(ghost_.size()) > ghost_cap_) {
      ghost_index_.erase(ghost_.back());
      ghost_.pop_back();
    }
  }

  // True (and the ghost entry removed) when `key` was evicted recently.
  bool ForgetGhost(BlockHash key) {
    auto it = ghost_index_.find(key);
    if (it == ghost_index_.end()) return false;
    ghost_.erase(it->second);
    ghost_index_.erase(it);
    return true;
  }

  const int64_t capacity_;
  const int64_t ghost_cap_;
  const bool adaptive_;
  WindowClimber climber_;
  int64_t window_cap_ = 1;
  std::list<BlockHash> window_, main_;  // most recent first
  absl::flat_hash_map<BlockHash, Entry> entries_;
  std::list<BlockHash> ghost_;  // most recent first
  absl::flat_hash_map<BlockHash, std::list<BlockHash>::iterator> ghost_index_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewGhostPolicy(int64_t capacity_blocks,
                                               const GhostOptions& options) {
  return std::make_unique<GhostPolicy>(capacity_blocks, options);
}

}  // namespace strata::kvstore::internal
