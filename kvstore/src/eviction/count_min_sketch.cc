#include "strata/kvstore/count_min_sketch.h"

#include <algorithm>
#include <bit>

namespace strata::kvstore {

CountMinSketch::CountMinSketch(const Options& options)
    : mask_(std::bit_ceil(std::max<uint64_t>(1, options.width)) - 1),
      max_count_(options.max_count),
      age_every_(std::max<int64_t>(1, options.age_every)),
      halve_additions_(options.halve_additions) {
  counters_.assign(kRows * (mask_ + 1), 0);
}

// splitmix64 of the key with a per-row constant: rows hash independently.
size_t CountMinSketch::Index(int row, BlockHash key) const {
  uint64_t z = key + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(row + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<size_t>(row) * (mask_ + 1) + (z & mask_);
}

void CountMinSketch::Add(BlockHash key) {
  const int estimate = Estimate(key);
  if (estimate < max_count_) {
    for (int row = 0; row < kRows; ++row) {
      uint8_t& c = counters_[Index(row, key)];
      if (c == estimate) ++c;
    }
  }
  if (++additions_ >= age_every_) Age();
}

int CountMinSketch::Estimate(BlockHash key) const {
  int m = max_count_;
  for (int row = 0; row < kRows; ++row) m = std::min<int>(m, counters_[Index(row, key)]);
  return m;
}

void CountMinSketch::Age() {
  for (uint8_t& c : counters_) c >>= 1;
  additions_ = halve_additions_ ? additions_ / 2 : 0;
}

}  // namespace strata::kvstore
