#include "strata/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

namespace strata {
namespace {

std::unique_ptr<Request> MakeRequest(const std::string& id, int prompt_len, int first_token = 0) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->tokens.resize(prompt_len);
  std::iota(r->tokens.begin(), r->tokens.end(), first_token);
  r->prompt_len = prompt_len;
  return r;
}

// Plays the engine's part: after a step, every request that computed all its tokens samples
// one more (a fake token).
void FinishStep(Scheduler& s, const SchedulerOutput& out) {
  s.OnStepDone(out);
  for (const auto& seq : out.seqs) {
    if (seq.request->num_computed == seq.request->num_tokens()) {
      seq.request->tokens.push_back(7);
    }
  }
}

TEST(SchedulerTest, ChunkedPrefillRespectsTheTokenBudget) {
  BlockManager bm(64, 4, true);
  Scheduler s({/*max_num_seqs=*/8, /*max_num_batched_tokens=*/10, true}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 25);
  s.Add(a.get());
  std::vector<int> chunks;
  for (int i = 0; i < 3; ++i) {
    auto out = s.Schedule();
    ASSERT_EQ(out.seqs.size(), 1u);
    chunks.push_back(out.seqs[0].num_tokens);
    FinishStep(s, out);
  }
  EXPECT_EQ(chunks, (std::vector<int>{10, 10, 5}));
  EXPECT_EQ(a->num_computed, 25);
  EXPECT_EQ(a->num_tokens(), 26);  // sampled after the last chunk only
  auto out = s.Schedule();         // decode: one token
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].num_tokens, 1);
}

TEST(SchedulerTest, DecodesAndPrefillsShareAStep) {
  BlockManager bm(64, 4, true);
  Scheduler s({8, 16, true}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 8), b = MakeRequest("b", 30, 100);
  s.Add(a.get());
  FinishStep(s, s.Schedule());  // a prefilled, sampled
  s.Add(b.get());
  auto out = s.Schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].request, a.get());
  EXPECT_EQ(out.seqs[0].num_tokens, 1);
  EXPECT_EQ(out.seqs[1].request, b.get());
  EXPECT_EQ(out.seqs[1].num_tokens, 15);
  EXPECT_EQ(out.num_tokens, 16);
}

TEST(SchedulerTest, MaxNumSeqsLimitsAdmission) {
  BlockManager bm(64, 4, true);
  Scheduler s({2, 100, true}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 4), b = MakeRequest("b", 4, 10), c = MakeRequest("c", 4, 20);
  s.Add(a.get());
  s.Add(b.get());
  s.Add(c.get());
  auto out = s.Schedule();
  EXPECT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(SchedulerTest, PreemptsTheNewestRequestWhenBlocksRunOut) {
  BlockManager bm(4, 4, false);  // 16 token slots
  Scheduler s({8, 64, true}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 7), b = MakeRequest("b", 7, 50);
  s.Add(a.get());
  s.Add(b.get());
  FinishStep(s, s.Schedule());  // both prefilled: 2 blocks each, all 4 used
  EXPECT_EQ(bm.num_free_blocks(), 0);
  FinishStep(s, s.Schedule());  // 8th token of each fits in the existing blocks
  auto out = s.Schedule();      // 9th token needs a new block: b is preempted for a
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], b.get());
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].request, a.get());
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_EQ(b->state, Request::State::kWaiting);
  EXPECT_EQ(b->num_tokens(), 9);  // its generated tokens are kept for recompute
  FinishStep(s, out);
  // a finishes: its blocks come back and b is recomputed from all 9 of its tokens.
  s.Remove(a.get());
  out = s.Schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].request, b.get());
  EXPECT_EQ(out.seqs[0].num_tokens, 9);
  EXPECT_EQ(s.num_preemptions(), 1);
}

TEST(SchedulerTest, ReusesCachedPrefixBlocksButAlwaysComputesOneToken) {
  BlockManager bm(16, 4, true);
  Scheduler s({8, 64, true}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 12);
  s.Add(a.get());
  FinishStep(s, s.Schedule());
  EXPECT_EQ(a->block_hashes.size(), 3u);
  s.Remove(a.get());
  // Same 12-token prompt: 2 blocks reused (the 3rd holds the last token, recomputed).
  auto b = MakeRequest("b", 12);
  s.Add(b.get());
  auto out = s.Schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(b->num_cached_prompt, 8);
  EXPECT_EQ(out.seqs[0].num_tokens, 4);
  // A prompt that diverges in the second block reuses only the first.
  auto c = MakeRequest("c", 12);
  c->tokens[5] = 999;
  s.Add(c.get());
  out = s.Schedule();
  EXPECT_EQ(c->num_cached_prompt, 4);
}

TEST(SchedulerTest, WithoutChunkingAPromptWaitsForAWholeStep) {
  BlockManager bm(64, 4, true);
  Scheduler s({8, 10, false}, &bm, BlockHasher(1));
  auto a = MakeRequest("a", 6), b = MakeRequest("b", 6, 10);
  s.Add(a.get());
  s.Add(b.get());
  auto out = s.Schedule();
  ASSERT_EQ(out.seqs.size(), 1u);  // b would need 6 more than the 4 left
  EXPECT_EQ(s.num_waiting(), 1);
}

}  // namespace
}  // namespace strata
