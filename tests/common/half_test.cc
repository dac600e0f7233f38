#include "strata/common/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata {
namespace {

TEST(HalfTest, Bf16RoundTripAndRounding) {
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(HalfTest, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToF16(f), h) << "h=" << h;
  }
  EXPECT_EQ(F16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);               // rounds to inf
}

}  // namespace
}  // namespace strata
