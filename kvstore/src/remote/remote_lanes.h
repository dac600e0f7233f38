#pragma once
// The staging buffer of a RemoteTier split into lanes: each transfer owns one lane while its
// bytes are in flight, so up to `count` transfers run at once and none shares memory.
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata::kvstore::remote {

class Lanes {
 public:
  Lanes(int count, size_t lane_bytes) : lane_bytes_(lane_bytes) {
    for (int i = count - 1; i >= 0; --i) free_.push_back(i);
  }
  // Blocks until a lane is free; returns its byte offset in the staging buffer. A caller that
  // already holds a lane must use TryTake instead: waiting while holding one can deadlock.
  size_t Take() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Lanes::Available));
    return PopLocked();
  }
  // A free lane's offset, or nullopt at once when every lane is taken.
  std::optional<size_t> TryTake() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!Available()) return std::nullopt;
    return PopLocked();
  }
  void Give(size_t offset) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    free_.push_back(static_cast<int>(offset / lane_bytes_));
  }

 private:
  bool Available() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !free_.empty(); }
  size_t PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int lane = free_.back();
    free_.pop_back();
    return static_cast<size_t>(lane) * lane_bytes_;
  }

  const size_t lane_bytes_;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
};

// Holds one lane until it is destroyed (movable: a posted put keeps its lane until its transfer
// is done).
class LaneGuard {
 public:
  explicit LaneGuard(Lanes& lanes) : lanes_(&lanes), offset_(lanes.Take()) {}
  static std::optional<LaneGuard> TryTake(Lanes& lanes) {
    std::optional<size_t> offset = lanes.TryTake();
    if (!offset) return std::nullopt;
    return LaneGuard(lanes, *offset);
  }
  LaneGuard(LaneGuard&& other) noexcept
      : lanes_(std::exchange(other.lanes_, nullptr)), offset_(other.offset_) {}
  LaneGuard& operator=(LaneGuard&&) = delete;
  LaneGuard(const LaneGuard&) = delete;
  LaneGuard& operator=(const LaneGuard&) = delete;
  ~LaneGuard() {
    if (lanes_ != nullptr) lanes_->Give(offset_);
  }
  size_t offset() const { return offset_; }

 private:
  LaneGuard(Lanes& lanes, size_t offset) : lanes_(&lanes), offset_(offset) {}

  Lanes* lanes_;  // null once moved from
  size_t offset_;
};

}  // namespace strata::kvstore::remote
