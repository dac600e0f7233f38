#include "strata/kvstore/count_min_sketch.h"

#include "gtest/gtest.h"

namespace strata::kvstore {
namespace {

CountMinSketch::Options Opts(uint64_t width, uint8_t max_count, int64_t age_every,
                             bool halve_additions) {
  return {.width = width,
          .max_count = max_count,
          .age_every = age_every,
          .halve_additions = halve_additions};
}

TEST(CountMinSketchTest, CountsUsesPerKey) {
  CountMinSketch s(Opts(1024, 255, 1'000'000, false));
  for (int i = 0; i < 5; ++i) s.Add(7);
  s.Add(8);
  EXPECT_EQ(s.Estimate(7), 5);
  EXPECT_EQ(s.Estimate(8), 1);
  EXPECT_EQ(s.Estimate(9), 0);
}

TEST(CountMinSketchTest, WidthIsRoundedUpToAPowerOfTwo) {
  CountMinSketch s(Opts(1000, 255, 100, false));
  EXPECT_EQ(s.width(), 1024u);
  EXPECT_EQ(s.memory_bytes(), 4u * 1024u);
}

TEST(CountMinSketchTest, CountersSaturateAtMaxCount) {
  CountMinSketch s(Opts(64, 15, 1'000'000, false));
  for (int i = 0; i < 40; ++i) s.Add(3);
  EXPECT_EQ(s.Estimate(3), 15);
}

TEST(CountMinSketchTest, CollisionsOnlyOvercount) {
  // 4 counters per row for 200 keys: heavy collisions, yet no key reads below its uses.
  CountMinSketch s(Opts(4, 255, 1'000'000, false));
  for (BlockHash k = 1; k <= 200; ++k) {
    for (BlockHash n = 0; n < k % 3; ++n) s.Add(k);
  }
  for (BlockHash k = 1; k <= 200; ++k) EXPECT_GE(s.Estimate(k), static_cast<int>(k % 3));
}

TEST(CountMinSketchTest, AgingHalvesEveryCounter) {
  CountMinSketch s(Opts(1024, 255, 10, false));
  for (int i = 0; i < 9; ++i) s.Add(1);
  EXPECT_EQ(s.Estimate(1), 9);
  s.Add(2);  // the 10th addition ages the sketch
  EXPECT_EQ(s.Estimate(1), 4);
  EXPECT_EQ(s.Estimate(2), 0);
}

TEST(CountMinSketchTest, AfterAnAgingAdditionsRestartFromZeroOrHalf) {
  // From zero: the next aging comes 10 additions later.
  CountMinSketch zero(Opts(1024, 255, 10, false));
  for (int i = 0; i < 10; ++i) zero.Add(1);  // ages: 10 -> 5
  for (int i = 0; i < 9; ++i) zero.Add(2);
  EXPECT_EQ(zero.Estimate(1), 5);
  // From half: the next aging comes 5 additions later.
  CountMinSketch half(Opts(1024, 255, 10, true));
  for (int i = 0; i < 10; ++i) half.Add(1);  // ages: 10 -> 5, additions 10 -> 5
  for (int i = 0; i < 4; ++i) half.Add(2);
  EXPECT_EQ(half.Estimate(1), 5);
  half.Add(2);  // the 5th: ages again
  EXPECT_EQ(half.Estimate(1), 2);
  EXPECT_EQ(half.Estimate(2), 2);
}

}  // namespace
}  // namespace strata::kvstore
