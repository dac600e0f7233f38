#pragma once
// Approximate recent use counts in bounded memory: a count-min sketch (4 rows of saturating
// 8-bit counters, conservative update) with TinyLFU-style aging: every `age_every` additions
// all counters are halved, so counts describe recent traffic and old keys fade. Estimates never
// undercount recent uses (between agings); collisions can only overcount. The frequency-based
// eviction policies (W-TinyLFU's admission) and TieredStore's disk admission filter both count
// with it.
//
// Thread-safety: none; the owner serializes calls.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "strata/common/block_hash.h"

namespace strata::kvstore {

class CountMinSketch {
 public:
  struct Options {
    // Counters per row, rounded up to a power of two.
    uint64_t width = 4096;
    // Counters saturate here (at most 255).
    uint8_t max_count = 255;
    // Additions between two agings (at least 1).
    int64_t age_every = 40960;
    // After an aging the count of additions restarts from half its value (TinyLFU's reset:
    // the halved counters still hold half a sample) or, when false, from zero.
    bool halve_additions = false;
  };
  explicit CountMinSketch(const Options& options);

  // Counts one use of `key`: only the key's counters at their current minimum grow.
  void Add(BlockHash key);
  // The smallest of `key`'s counters: at least its uses since the last aging (capped).
  int Estimate(BlockHash key) const;
  uint64_t width() const { return mask_ + 1; }
  size_t memory_bytes() const { return counters_.size(); }

 private:
  static constexpr int kRows = 4;
  size_t Index(int row, BlockHash key) const;
  void Age();

  uint64_t mask_ = 0;
  uint8_t max_count_;
  int64_t age_every_;
  bool halve_additions_;
  std::vector<uint8_t> counters_;  // kRows x width
  int64_t additions_ = 0;
};

}  // namespace strata::kvstore
