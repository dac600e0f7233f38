#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "strata/engine/sampling.h"

namespace strata {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 0.5f, 2.9f}; }

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Rng rng(1);
  auto l = Logits();
  EXPECT_EQ(Sample(l, p, {}, {}, rng).token, 1);
  std::vector<float> tie = {5, 1, 5};
  EXPECT_EQ(Sample(tie, p, {}, {}, rng).token, 0);
}

TEST(SamplerTest, SeededSamplingIsReproducibleAndFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  std::map<int, int> counts;
  Rng a(42), b(42);
  for (int i = 0; i < 20000; ++i) {
    auto l1 = Logits(), l2 = Logits();
    const int t = Sample(l1, p, {}, {}, a).token;
    ASSERT_EQ(t, Sample(l2, p, {}, {}, b).token);
    ++counts[t];
  }
  // Expected probabilities from softmax of the logits.
  auto l = Logits();
  double z = 0;
  for (float v : l) z += std::exp(v);
  for (int t = 0; t < 5; ++t) {
    EXPECT_NEAR(counts[t] / 20000.0, std::exp(l[t]) / z, 0.015) << t;
  }
}

TEST(SamplerTest, RngGoldenValuesAreStable) {
  Rng r(0);
  // xoshiro256** seeded through splitmix64(0): fixed forever (seeded requests replay).
  const uint64_t first = r.Next();
  Rng r2(0);
  EXPECT_EQ(first, r2.Next());
  EXPECT_EQ(first, 0x99ec5f36cb75f2b4ull);
}

TEST(SamplerTest, TopKAndTopPAndMinPRestrictTheSupport) {
  Rng rng(7);
  for (int i = 0; i < 2000; ++i) {
    SamplingParams k;
    k.top_k = 2;
    auto l = Logits();
    const int t = Sample(l, k, {}, {}, rng).token;
    EXPECT_TRUE(t == 1 || t == 4) << t;
    SamplingParams p;
    p.top_p = 0.3f;  // token 1 alone has p ~ 0.36
    l = Logits();
    EXPECT_EQ(Sample(l, p, {}, {}, rng).token, 1);
    SamplingParams m;
    m.min_p = 0.5f;  // keeps tokens with p >= 0.5 p(1): 1, 4, 2
    l = Logits();
    const int u = Sample(l, m, {}, {}, rng).token;
    EXPECT_TRUE(u == 1 || u == 4 || u == 2) << u;
  }
}

TEST(SamplerTest, PenaltiesFollowOpenAiAndHfRules) {
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 1.5f;  // 3.0 - 1.5 = 1.5 < 2.9: token 4 wins
  Rng rng(0);
  std::vector<int32_t> output = {1};
  auto l = Logits();
  EXPECT_EQ(Sample(l, p, {}, output, rng).token, 4);
  SamplingParams f;
  f.temperature = 0;
  f.frequency_penalty = 0.05f;  // 3 occurrences: 3.0 - 0.15 = 2.85 < 2.9
  std::vector<int32_t> three = {1, 1, 1};
  l = Logits();
  EXPECT_EQ(Sample(l, f, {}, three, rng).token, 4);
  SamplingParams r;
  r.temperature = 0;
  r.repetition_penalty = 2.0f;  // prompt tokens count too: 3.0 / 2 = 1.5
  std::vector<int32_t> prompt = {1};
  l = Logits();
  EXPECT_EQ(Sample(l, r, prompt, {}, rng).token, 4);
}

TEST(SamplerTest, LogitBiasIsAddedAfterPenaltiesAndSendsRowsToTheHost) {
  SamplingParams p;
  p.temperature = 0;
  Rng rng(0);
  auto l = Logits();
  EXPECT_EQ(Sample(l, p, {}, {}, rng).token, 1);  // 3.0 is the argmax
  EXPECT_FALSE(NeedsHostSampling(p));
  p.logit_bias = {{4, 0.2f}};  // 2.9 + 0.2 = 3.1 > 3.0
  EXPECT_TRUE(NeedsHostSampling(p));
  l = Logits();
  EXPECT_EQ(Sample(l, p, {}, {}, rng).token, 4);
  p.logit_bias = {{1, -100.0f}};
  l = Logits();
  EXPECT_EQ(Sample(l, p, {}, {}, rng).token, 4);
  // The presence penalty (1.5) applies first, then the bias: 3.0 - 1.5 + 1.45 = 2.95 > 2.9.
  p.logit_bias = {{1, 1.45f}};
  p.presence_penalty = 1.5f;
  std::vector<int32_t> output = {1};
  l = Logits();
  EXPECT_EQ(Sample(l, p, {}, output, rng).token, 1);
  p.logit_bias = {{1, 1.35f}};
  l = Logits();
  EXPECT_EQ(Sample(l, p, {}, output, rng).token, 4);
  // Logprobs stay those of the unbiased distribution.
  SamplingParams lp;
  lp.temperature = 0;
  lp.logprobs = 1;
  lp.logit_bias = {{4, 50.0f}};
  l = Logits();
  SampleResult s = Sample(l, lp, {}, {}, rng);
  EXPECT_EQ(s.token, 4);
  ASSERT_EQ(s.top.size(), 1u);
  EXPECT_EQ(s.top[0].token, 1);
  EXPECT_LT(s.logprob, s.top[0].logprob);
}

TEST(SamplerTest, LogprobsAreFromTheRawDistribution) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  p.presence_penalty = 2.0f;
  Rng rng(0);
  auto l = Logits();
  std::vector<int32_t> output = {1};
  SampleResult s = Sample(l, p, {}, output, rng);
  double z = 0;
  for (float v : Logits()) z += std::exp(v);
  EXPECT_EQ(s.token, 4);
  EXPECT_NEAR(s.logprob, 2.9 - std::log(z), 1e-5);
  ASSERT_EQ(s.top.size(), 2u);
  EXPECT_EQ(s.top[0].token, 1);
  EXPECT_EQ(s.top[1].token, 4);
  EXPECT_NEAR(s.top[0].logprob, 3.0 - std::log(z), 1e-5);
}

TEST(SamplerTest, ValidateRejectsOutOfRangeParameters) {
  SamplingParams p;
  EXPECT_TRUE(p.Validate(10).ok());
  p.top_p = 0;
  EXPECT_EQ(p.Validate(10).code(), absl::StatusCode::kInvalidArgument);
  p = {};
  p.temperature = -1;
  EXPECT_FALSE(p.Validate(10).ok());
  p = {};
  p.stop_token_ids = {10};
  EXPECT_NE(p.Validate(10).message().find("stop_token_ids"), std::string::npos);
  p = {};
  p.stop = {""};
  EXPECT_FALSE(p.Validate(10).ok());
  p = {};
  p.logit_bias = {{9, 100.0f}, {0, -100.0f}};
  EXPECT_TRUE(p.Validate(10).ok());
  for (const auto& bad :
       std::vector<std::vector<std::pair<int32_t, float>>>{{{10, 1.0f}},
                                                           {{-1, 1.0f}},
                                                           {{1, 100.5f}},
                                                           {{1, -101.0f}},
                                                           {{1, NAN}},
                                                           {{1, 1.0f}, {1, 2.0f}}}) {
    p.logit_bias = bad;
    const absl::Status st = p.Validate(10);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(st.message().substr(0, 10), "logit_bias") << st;
  }
  p.logit_bias.assign(SamplingParams::kMaxLogitBias + 1, {0, 1.0f});
  EXPECT_NE(p.Validate(1000).message().find("at most 300"), std::string::npos);
}

}  // namespace
}  // namespace strata
