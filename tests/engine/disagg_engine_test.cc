// The engine's half of disaggregated serving, without a network: a prefill-only request on one
// engine, its blocks copied byte for byte into blocks another engine reserved, decoding there.
// Greedy and seeded outputs must equal one engine doing both phases.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "strata/engine/engine.h"
#include "strata/engine/presets.h"

namespace strata {
namespace {

class DisaggEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_disagg_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::unique_ptr<Engine> Make(int num_blocks = 64) {
    EngineOptions opts;
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = num_blocks;
    opts.scheduler.max_num_batched_tokens = 16;  // several prefill chunks
    auto e = Engine::Create(*dir_, opts);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  static std::string* dir_;
};
std::string* DisaggEngineTest::dir_ = nullptr;

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  int32_t cached = 0;
  FinishReason finish = FinishReason::kNone;
};

void Collect(Engine& e, Result& r) {
  while (e.HasUnfinished()) {
    auto outs = e.Step();
    ASSERT_TRUE(outs.ok()) << outs.status();
    for (auto& o : *outs) {
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.text += o.new_text;
      r.cached = o.cached_tokens;
      if (o.finished) r.finish = o.finish_reason;
    }
  }
}

uint8_t* BlockPtr(Engine& e, BlockId b) {
  return static_cast<uint8_t*>(e.runner().kv_cache().data) + size_t(b) * e.runner().kv_block_bytes();
}

// Prefill on `p`, copy the blocks from first_block on into `d`'s reservation, decode on `d`.
Result Disaggregated(Engine& p, Engine& d, const std::vector<int32_t>& prompt,
                     const SamplingParams& params, const std::string& id) {
  Result r;
  auto res = d.ReservePrompt(prompt);
  EXPECT_TRUE(res.ok()) << res.status();
  EXPECT_TRUE(p.AddPrefillRequest(id, prompt, params).ok());
  SampleResult first{};
  while (p.HasUnfinished()) {
    auto outs = p.Step();
    EXPECT_TRUE(outs.ok());
    for (auto& o : *outs) {
      EXPECT_EQ(o.new_tokens.size(), 1u);
      first.token = o.new_tokens[0];
      EXPECT_TRUE(o.finished);
    }
  }
  std::vector<BlockId> held = p.TakeHeldBlocks(id);
  EXPECT_EQ(held.size(), res->blocks.size());
  const int first_block = res->cached_tokens / 8;
  for (size_t i = first_block; i < held.size(); ++i) {
    std::memcpy(BlockPtr(d, res->blocks[i]), BlockPtr(p, held[i]), p.runner().kv_block_bytes());
  }
  p.ReleaseBlocks(held);
  EXPECT_TRUE(p.TakeHeldBlocks(id).empty());
  EXPECT_TRUE(d.AddPrefilledRequest(id, prompt, params, *res, first).ok());
  Collect(d, r);
  return r;
}

TEST_F(DisaggEngineTest, GreedyAndSeededOutputsMatchOneEngine) {
  auto mixed = Make(), p = Make(), d = Make();
  const std::vector<int32_t> prompt = mixed->tokenizer().Encode(
      "A prefill worker computes the whole prompt, chunk by chunk, and a decode worker "
      "continues it from the blocks it received.", true);
  ASSERT_GT(prompt.size(), 17u);  // spans several blocks and prefill chunks
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams params;
    params.max_tokens = 12;
    params.temperature = temperature;
    params.seed = 7;
    params.ignore_eos = true;
    Result want;
    ASSERT_TRUE(mixed->AddRequest("ref", prompt, params).ok());
    Collect(*mixed, want);
    Result got = Disaggregated(*p, *d, prompt, params, "r" + std::to_string(temperature));
    EXPECT_EQ(got.tokens, want.tokens) << "temperature " << temperature;
    EXPECT_EQ(got.text, want.text);
    EXPECT_EQ(got.finish, FinishReason::kLength);
  }
  // Every block went back: nothing held, nothing leaked.
  EXPECT_EQ(p->block_manager().num_free_blocks(), p->block_manager().num_blocks());
  EXPECT_EQ(d->block_manager().num_free_blocks(), d->block_manager().num_blocks());
}

TEST_F(DisaggEngineTest, DecodeSideReusesItsCachedPrefixAndOnlyNeedsTheRest) {
  auto mixed = Make(), p = Make(), d = Make();
  std::vector<int32_t> prompt = mixed->tokenizer().Encode(
      "Shared system prompt that many requests start with, followed by more words.", true);
  SamplingParams params;
  params.max_tokens = 6;
  params.temperature = 0;
  params.ignore_eos = true;
  Result want;
  ASSERT_TRUE(mixed->AddRequest("ref", prompt, params).ok());
  Collect(*mixed, want);
  Result first = Disaggregated(*p, *d, prompt, params, "a");
  EXPECT_EQ(first.tokens, want.tokens);
  EXPECT_EQ(first.cached, 0);
  // The second time the decode worker holds every full prompt block but the last token's.
  auto res = d->ReservePrompt(prompt);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->cached_tokens, int32_t((prompt.size() - 1) / 8 * 8));
  d->CancelReservation(*res);
  Result second = Disaggregated(*p, *d, prompt, params, "b");
  EXPECT_EQ(second.tokens, want.tokens);
  EXPECT_GT(second.cached, 0);
}

TEST_F(DisaggEngineTest, ReservationFailsCleanlyWhenBlocksRunOut) {
  auto d = Make(/*num_blocks=*/4);
  std::vector<int32_t> prompt(40, 5);  // 5 blocks of 8
  auto res = d->ReservePrompt(prompt);
  EXPECT_EQ(res.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(d->block_manager().num_free_blocks(), 4);
}

TEST_F(DisaggEngineTest, FirstTokenEosFinishesAtOnceAndBadInputIsRejected) {
  auto d = Make();
  std::vector<int32_t> prompt(10, 7);
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 5;
  auto res = d->ReservePrompt(prompt);
  ASSERT_TRUE(res.ok());
  KvReservation short_res;  // does not cover the prompt
  EXPECT_FALSE(d->AddPrefilledRequest("x", prompt, params, short_res, {1}).ok());
  SampleResult eos{d->config().eos_token_ids.at(0)};
  ASSERT_TRUE(d->AddPrefilledRequest("y", prompt, params, *res, eos).ok());
  Result r;
  Collect(*d, r);
  EXPECT_EQ(r.tokens.size(), 1u);
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(d->block_manager().num_free_blocks(), d->block_manager().num_blocks());
}

}  // namespace
}  // namespace strata
