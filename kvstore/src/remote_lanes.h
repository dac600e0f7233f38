#pragma once
// The staging buffer of a RemoteTier split into lanes: each transfer owns one lane while its
// bytes are in flight, so up to `count` transfers run at once and none shares memory.
#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace strata::kvstore::remote {

class Lanes {
 public:
  Lanes(int count, size_t lane_bytes) : lane_bytes_(lane_bytes) {
    for (int i = count - 1; i >= 0; --i) free_.push_back(i);
  }
  // Blocks until a lane is free; returns its byte offset in the staging buffer.
  size_t Take() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Lanes::Available));
    const int lane = free_.back();
    free_.pop_back();
    return static_cast<size_t>(lane) * lane_bytes_;
  }
  void Give(size_t offset) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    free_.push_back(static_cast<int>(offset / lane_bytes_));
  }

 private:
  bool Available() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !free_.empty(); }

  const size_t lane_bytes_;
  absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
};

// Holds one lane for a scope.
class LaneGuard {
 public:
  explicit LaneGuard(Lanes& lanes) : lanes_(lanes), offset_(lanes.Take()) {}
  ~LaneGuard() { lanes_.Give(offset_); }
  LaneGuard(const LaneGuard&) = delete;
  LaneGuard& operator=(const LaneGuard&) = delete;
  size_t offset() const { return offset_; }

 private:
  Lanes& lanes_;
  const size_t offset_;
};

}  // namespace strata::kvstore::remote
