// RunnerOptions::memory_share: the KV pool arithmetic (KvPoolBytesForShare) and a runner on the
// CPU plugin sized by a share of the memory the plugin reports.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "nlohmann/json.hpp"
#include "strata/engine/model_runner.h"
#include "strata/engine/weight_source.h"

namespace strata {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(KvPoolBytesForShareTest, ShareLessWeightsLessFivePercentReserve) {
  // 0.5 of 80 GiB = 40 GiB; reserve 5% of that = 2 GiB; weights 16 GiB.
  auto pool = KvPoolBytesForShare(0.5, 80 * kGiB, 16 * kGiB, kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(*pool, int64_t(22 * kGiB));
}

TEST(KvPoolBytesForShareTest, ReserveIsAtLeastOneGiB) {
  // 0.5 of 16 GiB = 8 GiB; 5% would be 0.4 GiB, so the reserve is 1 GiB.
  auto pool = KvPoolBytesForShare(0.5, 16 * kGiB, 2 * kGiB, kMiB);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(*pool, int64_t(5 * kGiB));
  auto whole = KvPoolBytesForShare(1.0, 16 * kGiB, 2 * kGiB, kMiB);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, int64_t(13 * kGiB));
}

TEST(KvPoolBytesForShareTest, TooSmallForWeightsAndTwoBlocksNamesTheNumbers) {
  // 0.1 of 80 GiB = 8 GiB: 7 GiB of weights + 1 GiB reserve leave nothing.
  auto pool = KvPoolBytesForShare(0.1, 80 * kGiB, 7 * kGiB, kMiB);
  ASSERT_EQ(pool.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.status().message(),
            "memory share 0.1 of 80.00 GiB is 8.00 GiB, too small for 7.00 GiB of weights, a "
            "1.00 GiB reserve for activations and 2 KV blocks of 1048576 bytes (raise the share "
            "or size the pool in blocks or MiB)");
  // Exactly two blocks fit; one byte less does not.
  const uint64_t total = 4 * kGiB;
  EXPECT_EQ(*KvPoolBytesForShare(0.5, total, kGiB - 2 * kMiB, kMiB), int64_t(2 * kMiB));
  EXPECT_EQ(KvPoolBytesForShare(0.5, total, kGiB - 2 * kMiB + 1, kMiB).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(KvPoolBytesForShareTest, ShareOutsideZeroToOneIsInvalid) {
  for (double bad : {0.0, -0.25, 1.01, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(KvPoolBytesForShare(bad, 80 * kGiB, kGiB, kMiB).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

ModelConfig TinyLlama() {
  auto c = ModelConfig::FromJson(nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 384,
    "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": false})"),
                                 "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : ModelConfig();
}

class MemoryShareRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto plugin = LoadPlugin("cpu");
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    plugin_ = *plugin;
    RunnerOptions probe;
    probe.num_kv_blocks = 2;
    auto runner = Create(probe);
    ASSERT_TRUE(runner.ok()) << runner.status();
    total_ = (*runner)->backend().info().total_memory;
    weights_ = (*runner)->weight_bytes();
    block_ = (*runner)->kv_block_bytes();
    ASSERT_GT(total_, 2 * kGiB) << "the CPU plugin reports physical memory as total_memory";
  }

  absl::StatusOr<std::unique_ptr<ModelRunner>> Create(RunnerOptions options) {
    options.block_size = 8;
    const ModelConfig config = TinyLlama();
    return ModelRunner::Create(plugin_, config, RandomWeights(config, 1), options);
  }

  std::shared_ptr<Plugin> plugin_;
  uint64_t total_ = 0, weights_ = 0, block_ = 0;
};

TEST_F(MemoryShareRunnerTest, PoolIsTheShareLessWeightsAndReserve) {
  // A share that leaves 64.5 blocks after the weights and the 1 GiB reserve.
  RunnerOptions o;
  o.memory_share = (double(kGiB) + double(weights_) + 64.5 * double(block_)) / double(total_);
  auto runner = Create(o);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_EQ((*runner)->num_kv_blocks(), 64);
}

TEST_F(MemoryShareRunnerTest, ExplicitSizesWinOverTheShare) {
  RunnerOptions o;
  o.memory_share = 0.5;
  o.kv_cache_bytes = int64_t(10 * block_);
  auto by_bytes = Create(o);
  ASSERT_TRUE(by_bytes.ok()) << by_bytes.status();
  EXPECT_EQ((*by_bytes)->num_kv_blocks(), 10);
  o.num_kv_blocks = 6;
  auto by_blocks = Create(o);
  ASSERT_TRUE(by_blocks.ok()) << by_blocks.status();
  EXPECT_EQ((*by_blocks)->num_kv_blocks(), 6);
}

TEST_F(MemoryShareRunnerTest, TooSmallOrOutOfRangeShareFails) {
  RunnerOptions o;
  o.memory_share = double(kGiB) / 2 / double(total_);  // less than the reserve alone
  auto small = Create(o);
  ASSERT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("too small for"), std::string::npos) << small.status();
  o.memory_share = 1.5;
  EXPECT_EQ(Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.memory_share = -0.5;
  EXPECT_EQ(Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata
