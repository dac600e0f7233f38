#pragma once
// The built-in eviction policies, constructed by the registry (eviction_policy.cc). They are
// named here rather than self-registered from their own files so that linking strata::kvstore
// statically can never drop them (an unreferenced object's static initializers do not run).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>

#include "strata/kvstore/eviction_policy.h"

namespace strata::kvstore::internal {

// The least recently inserted/touched key of a most-recent-first list that `evictable` accepts.
inline std::optional<BlockHash> OldestEvictable(const std::list<BlockHash>& list,
                                                const std::function<bool(BlockHash)>& evictable) {
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (evictable(*it)) return *it;
  }
  return std::nullopt;
}

std::unique_ptr<EvictionPolicy> NewLruPolicy(int64_t capacity_blocks);
std::unique_ptr<EvictionPolicy> NewS3FifoPolicy(int64_t capacity_blocks);
std::unique_ptr<EvictionPolicy> NewArcPolicy(int64_t capacity_blocks);

// W-TinyLFU (eviction_tinylfu.cc). With `prefix_aware`, keys whose parent block left the tier
// (orphans: unusable as a prefix) are evicted before anything else.
struct TinyLfuOptions {
  double window_fraction = 0.01;    // share of capacity in the admission window (>= 1 block)
  double protected_fraction = 0.8;  // share of the main area kept for keys used twice
  int64_t sample_factor = 10;       // the sketch halves its counts every factor*capacity uses
  bool prefix_aware = false;
  // Hill-climb the window share (WindowClimber below).
  bool adaptive = false;
  int64_t adapt_period = 2048;
};
std::unique_ptr<EvictionPolicy> NewTinyLfuPolicy(int64_t capacity_blocks,
                                                 const TinyLfuOptions& options);

// Ghost-admission LRU (eviction_ghost.cc): new keys enter an LRU window; a key leaving the
// window enters the main LRU only if it is in the ghost list (keys evicted recently, up to
// ghost_factor x capacity), else it is evicted and remembered there.
struct GhostOptions {
  double window_fraction = 0.01;
  int64_t ghost_factor = 4;
  bool adaptive = true;  // hill-climb the window share
  int64_t adapt_period = 2048;
};
std::unique_ptr<EvictionPolicy> NewGhostPolicy(int64_t capacity_blocks,
                                               const GhostOptions& options);

// Hill climbing of a window share, as Caffeine does for W-TinyLFU: every `period` accesses
// (a Touch is a hit, a new key a miss) the window moves by a step, in the same direction while
// the hit rate does not fall by more than its sampling noise, reversed when it does. The step
// starts at 6.25% of capacity and decays by 2% a period to no less than 0.5% (at least one block).
class WindowClimber {
 public:
  WindowClimber(int64_t capacity, int64_t period)
      : capacity_(capacity),
        period_(std::max<int64_t>(1, period)),
        step_(0.0625 * static_cast<double>(capacity)) {}
  // Records one access; at the end of a period returns the next window size (in [1, cap-1]).
  std::optional<int64_t> Record(bool hit, int64_t window) {
    hits_ += hit ? 1 : 0;
    if (++samples_ < period_) return std::nullopt;
    const double rate = static_cast<double>(hits_) / static_cast<double>(samples_);
    // Reverse only when the last move hurt by more than the sampling noise of one period
    // (one standard deviation of a binomial rate); small random dips must not pin the
    // window in a flat region.
    const double noise = std::sqrt(previous_rate_ * (1 - previous_rate_) / period_);
    if (rate < previous_rate_ - noise) direction_ = -direction_;
    previous_rate_ = rate;
    hits_ = samples_ = 0;
    const double min_step = std::max(1.0, 0.005 * static_cast<double>(capacity_));
    step_ = std::max(step_ * 0.98, min_step);
    const int64_t next = window + direction_ * static_cast<int64_t>(std::llround(step_));
    return std::clamp<int64_t>(next, 1, std::max<int64_t>(1, capacity_ - 1));
  }

 private:
  const int64_t capacity_;
  const int64_t period_;
  double step_;
  int64_t samples_ = 0;
  int64_t hits_ = 0;
  double previous_rate_ = 0;
  int64_t direction_ = 1;  // +1 grows the window
};

}  // namespace strata::kvstore::internal
