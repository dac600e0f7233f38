// The engine's hooks for lower KV tiers: blocks handed out on eviction (write-back) or commit
// (write-through), imported back into the prefix cache, and prompt staging in EngineLoop.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "strata/engine/engine.h"
#include "strata/engine/engine_loop.h"
#include "strata/engine/presets.h"

namespace strata {
namespace {

struct Saved {
  BlockHash parent;
  std::vector<std::byte> bytes;
};

class EngineTieringTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_engine_tiering_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  // staging_slots > 0: a staging ring of that many blocks (0: the default size).
  // STRATA_TEST_PLUGIN (a plugin name or path) runs these tests on another backend, e.g. the
  // CUDA plugin on a GPU machine (page-locked staging, copies that really are asynchronous).
  static std::string TestPlugin() {
    const char* p = std::getenv("STRATA_TEST_PLUGIN");
    return p != nullptr && *p != '\0' ? p : "cpu";
  }
  static std::unique_ptr<Engine> Make(int blocks, size_t staging_slots = 0) {
    EngineOptions opts;
    opts.plugin = TestPlugin();
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = blocks;
    if (staging_slots > 0) {
      // Block bytes of the tiny preset at block size 8, from a probe engine.
      static const size_t block_bytes = [] {
        EngineOptions probe;
        probe.plugin = TestPlugin();
        probe.runner.block_size = 8;
        probe.runner.num_kv_blocks = 4;
        return (*Engine::Create(*dir_, probe))->kv_block_bytes();
      }();
      opts.kv_staging_bytes = staging_slots * block_bytes;
    }
    auto e = Engine::Create(*dir_, opts);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }
  static std::string* dir_;
};
std::string* EngineTieringTest::dir_ = nullptr;

SamplingParams Greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> Prompt(int n, int first) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = first + (i * 7) % 200;
  return p;
}

// Runs one request to completion; returns its tokens and the cached prompt tokens it reported.
std::pair<std::vector<int32_t>, int> RunToEnd(Engine& e, const std::string& id,
                                              const std::vector<int32_t>& prompt) {
  EXPECT_TRUE(e.AddRequest(id, prompt, Greedy(6)).ok());
  std::vector<int32_t> tokens;
  int cached = -1;
  while (e.HasUnfinished()) {
    auto outs = e.Step();
    EXPECT_TRUE(outs.ok()) << outs.status();
    for (const auto& o : *outs) {
      tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) cached = o.cached_tokens;
    }
  }
  return {tokens, cached};
}

// An offload target: the engine copies each evicted block straight into the slot the target
// reserves; the blocks it receives are those the staged path hands out, byte for byte. Blocks
// the target already holds (AlreadyExists) or has no room for are not copied.
TEST_F(EngineTieringTest, OffloadTargetReceivesWhatTheStagedPathHandsOut) {
  auto staged = Make(12);
  std::map<BlockHash, Saved> expected;
  staged->SetBlockOffload(Engine::OffloadOn::kEvict,
                          [&](BlockHash h, BlockHash parent, std::span<const std::byte> data) {
                            expected[h] = {parent, {data.begin(), data.end()}};
                          });
  auto direct = Make(12);
  const size_t bytes = direct->kv_block_bytes();
  constexpr size_t kSlots = 64;
  std::vector<std::byte> memory(kSlots * bytes);
  struct Reserved {
    BlockHash hash, parent;
    size_t slot;
  };
  std::map<uint64_t, Reserved> reserved;
  std::map<BlockHash, Saved> received;
  std::set<BlockHash> refused = {HashBlockChain(direct->block_hash_seed(), Prompt(41, 50), 8)[0]};
  size_t next_slot = 0, refusals = 0, aborted = 0;
  uint64_t next_id = 1;
  Engine::BlockOffloadTarget target;
  target.reserve = [&](BlockHash h, BlockHash parent) -> absl::StatusOr<Engine::BlockOffloadSlot> {
    if (received.contains(h) || refused.contains(h)) {
      ++refusals;
      return absl::AlreadyExistsError("held");
    }
    if (next_slot == kSlots) return absl::ResourceExhaustedError("full");
    const uint64_t id = next_id++;
    reserved[id] = {h, parent, next_slot};
    return Engine::BlockOffloadSlot{
        .id = id, .bytes = std::span<std::byte>(memory).subspan(next_slot++ * bytes, bytes)};
  };
  target.finish = [&](uint64_t id, bool copied) {
    ASSERT_TRUE(reserved.contains(id));
    const Reserved r = reserved[id];
    reserved.erase(id);
    if (!copied) {
      ++aborted;
      return;
    }
    const auto first = memory.begin() + static_cast<std::ptrdiff_t>(r.slot * bytes);
    received[r.hash] = {r.parent, {first, first + static_cast<std::ptrdiff_t>(bytes)}};
  };
  ASSERT_TRUE(direct->SetBlockOffloadTarget(Engine::OffloadOn::kEvict, target, memory).ok());
  for (const auto& [id, first] : std::vector<std::pair<std::string, int>>{
           {"a", 3}, {"b", 50}, {"c", 90}, {"d", 130}, {"e", 170}}) {
    const auto s = RunToEnd(*staged, id, Prompt(41, first));
    const auto d = RunToEnd(*direct, id, Prompt(41, first));
    EXPECT_EQ(s.first, d.first) << id;
  }
  direct->FlushKvOffloads();
  EXPECT_TRUE(reserved.empty());  // every reservation finished at a flush
  EXPECT_EQ(aborted, 0u);
  EXPECT_EQ(refusals, 1u);  // b's first block, when evicted
  ASSERT_GE(received.size(), 10u);
  EXPECT_EQ(received.size() + refusals, expected.size());
  for (const auto& [h, saved] : received) {
    ASSERT_TRUE(expected.contains(h)) << h;
    EXPECT_EQ(saved.parent, expected[h].parent);
    EXPECT_TRUE(saved.bytes == expected[h].bytes) << "block " << h;
  }
  // Back to a function: the target is dropped (and its memory unregistered).
  direct->SetBlockOffload(Engine::OffloadOn::kEvict, nullptr);
  RunToEnd(*direct, "f", Prompt(41, 7));
  EXPECT_EQ(direct->pending_kv_offloads(), 0u);
  EXPECT_FALSE(
      direct->SetBlockOffloadTarget(Engine::OffloadOn::kEvict, Engine::BlockOffloadTarget{},
                                    memory)
          .ok());  // reserve and finish are required
}

TEST_F(EngineTieringTest, EvictedBlocksComeBackByteIdenticalAndGiveTheSameTokens) {
  auto engine = Make(12);
  std::map<BlockHash, Saved> store;
  engine->SetBlockOffload(Engine::OffloadOn::kEvict,
                          [&](BlockHash h, BlockHash parent, std::span<const std::byte> data) {
                            store[h] = {parent, {data.begin(), data.end()}};
                          });
  const auto a = Prompt(41, 3);
  const auto [reference, cached0] = RunToEnd(*engine, "a", a);
  EXPECT_EQ(cached0, 0);
  // Other prompts push a's five full blocks out of the 12-block pool.
  RunToEnd(*engine, "b", Prompt(41, 50));
  RunToEnd(*engine, "c", Prompt(41, 90));
  RunToEnd(*engine, "d", Prompt(41, 130));
  std::vector<BlockHash> chain = HashBlockChain(engine->block_hash_seed(), a, 8);
  ASSERT_EQ(chain.size(), 5u);
  EXPECT_EQ(engine->CountCachedPrefix(chain), 0);
  for (size_t i = 0; i < chain.size(); ++i) {
    ASSERT_TRUE(store.contains(chain[i])) << i;
    EXPECT_EQ(store[chain[i]].parent, i == 0 ? kRootBlockHash : chain[i - 1]);
  }

  // A fresh engine (another worker) imports them and serves a from them.
  auto other = Make(12);
  std::vector<Engine::ImportedBlock> blocks;
  for (size_t i = 0; i < chain.size(); ++i) blocks.push_back({chain[i], store[chain[i]].parent});
  const int n = other->ImportCachedBlocks({}, blocks, [&](size_t i, std::span<std::byte> dst) {
    const auto& src = store[blocks[i].hash].bytes;
    std::copy(src.begin(), src.end(), dst.begin());
    return absl::OkStatus();
  });
  EXPECT_EQ(n, 5);
  EXPECT_EQ(other->CountCachedPrefix(chain), 5);
  // Their bytes in the pool are exactly what was offloaded.
  std::map<BlockHash, Saved> readback;
  other->SetBlockOffload(Engine::OffloadOn::kEvict,
                         [&](BlockHash h, BlockHash parent, std::span<const std::byte> data) {
                           readback[h] = {parent, {data.begin(), data.end()}};
                         });
  const auto [tokens, cached] = RunToEnd(*other, "a2", a);
  EXPECT_EQ(tokens, reference);
  EXPECT_EQ(cached, 40);
  RunToEnd(*other, "b2", Prompt(41, 50));
  RunToEnd(*other, "c2", Prompt(41, 90));
  RunToEnd(*other, "d2", Prompt(41, 130));
  for (BlockHash h : chain) {
    ASSERT_TRUE(readback.contains(h));
    EXPECT_EQ(readback[h].bytes, store[h].bytes);
  }
}

TEST_F(EngineTieringTest, WriteThroughOffloadsOnCommitAndImportStopsAtAFillError) {
  auto engine = Make(32);
  std::vector<BlockHash> offloaded;
  engine->SetBlockOffload(Engine::OffloadOn::kCommit,
                          [&](BlockHash h, BlockHash, std::span<const std::byte> data) {
                            EXPECT_EQ(data.size(), engine->kv_block_bytes());
                            offloaded.push_back(h);
                          });
  const auto a = Prompt(33, 7);
  RunToEnd(*engine, "a", a);
  std::vector<BlockHash> chain = HashBlockChain(engine->block_hash_seed(), a, 8);
  // 4 full prompt blocks, plus the block completed by generated tokens.
  ASSERT_GE(offloaded.size(), 4u);
  EXPECT_EQ(std::vector<BlockHash>(offloaded.begin(), offloaded.begin() + 4), chain);

  auto other = Make(32);
  std::vector<Engine::ImportedBlock> blocks;
  for (size_t i = 0; i < chain.size(); ++i) {
    blocks.push_back({chain[i], i == 0 ? kRootBlockHash : chain[i - 1]});
  }
  const int n = other->ImportCachedBlocks({}, blocks, [](size_t i, std::span<std::byte> dst) {
    if (i == 2) return absl::DataLossError("checksum mismatch");
    std::fill(dst.begin(), dst.end(), std::byte{0});
    return absl::OkStatus();
  });
  EXPECT_EQ(n, 2);
  EXPECT_EQ(other->CountCachedPrefix(chain), 2);
  EXPECT_EQ(other->block_manager().num_free_blocks(), 32);  // imported blocks are unreferenced
}

// Holds every staged prompt until released, then runs a task before the request is added.
class HoldingStager : public PromptStager {
 public:
  void Stage(std::span<const int32_t> prompt, std::string_view /*cache_salt*/,
             std::function<void(EngineTask)> ready) override {
    staged_prompt_len = prompt.size();
    pending_ = std::move(ready);
    staged.Notify();
  }
  void Release() {
    pending_([this](Engine&) { task_ran = true; });
  }
  absl::Notification staged;
  size_t staged_prompt_len = 0;
  std::atomic<bool> task_ran{false};

 private:
  std::function<void(EngineTask)> pending_;
};

TEST_F(EngineTieringTest, StagedRequestsRunTheStagersTaskFirstAndAbortWhileStaging) {
  auto loop = std::make_unique<EngineLoop>(Make(64));
  HoldingStager stager;
  loop->SetPromptStager(&stager);
  absl::Notification done;
  std::vector<int32_t> tokens;
  loop->Submit("a", Prompt(20, 3), Greedy(4), [&](const absl::Status& st, const RequestOutput& o) {
    ASSERT_TRUE(st.ok());
    tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    if (o.finished) done.Notify();
  });
  ASSERT_TRUE(stager.staged.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(stager.staged_prompt_len, 20u);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(done.HasBeenNotified());  // not added before staging finishes
  std::thread([&] { stager.Release(); }).join();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(stager.task_ran);
  EXPECT_EQ(tokens.size(), 4u);

  HoldingStager stager2;
  auto loop2 = std::make_unique<EngineLoop>(Make(64));
  loop2->SetPromptStager(&stager2);
  absl::Notification aborted;
  FinishReason reason = FinishReason::kNone;
  loop2->Submit("b", Prompt(20, 3), Greedy(50),
                [&](const absl::Status& st, const RequestOutput& o) {
                  ASSERT_TRUE(st.ok());
                  if (o.finished) {
                    reason = o.finish_reason;
                    aborted.Notify();
                  }
                });
  ASSERT_TRUE(stager2.staged.WaitForNotificationWithTimeout(absl::Seconds(10)));
  loop2->Abort("b");
  stager2.Release();
  ASSERT_TRUE(aborted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(reason, FinishReason::kAbort);
}

// Runs the same prompts through engines whose staging ring holds 2 blocks and 1 block (so the
// blocks one step evicts wrap it, flushing mid-step) and one with the default ring: every
// evicted block reaches the offload function once, with the same parent and bytes, in the
// same order.
TEST_F(EngineTieringTest, EvictionsThatWrapTheStagingRingArriveIntactAndInOrder) {
  struct Offload {
    BlockHash hash, parent;
    std::vector<std::byte> bytes;
    bool operator==(const Offload&) const = default;
  };
  auto run = [](std::unique_ptr<Engine> e) {
    std::vector<Offload> got;
    e->SetBlockOffload(Engine::OffloadOn::kEvict,
                       [&](BlockHash h, BlockHash parent, std::span<const std::byte> data) {
                         got.push_back({h, parent, {data.begin(), data.end()}});
                       });
    for (int i = 0; i < 6; ++i) RunToEnd(*e, "r" + std::to_string(i), Prompt(57, 11 + 31 * i));
    // One request that needs the whole pool evicts every cached block in its first step.
    RunToEnd(*e, "big", Prompt(8 * 15 - 6, 5));
    EXPECT_EQ(e->pending_kv_offloads(), 0u);  // idle: flushed
    return got;
  };
  const std::vector<Offload> small = run(Make(16, 2));
  const std::vector<Offload> large = run(Make(16));
  ASSERT_GE(small.size(), 30u);
  EXPECT_TRUE(small == large);
  EXPECT_TRUE(run(Make(16, 1)) == large);  // one slot: a flush before every block
  std::set<BlockHash> unique;
  for (const Offload& o : small) {
    unique.insert(o.hash);
    EXPECT_EQ(o.bytes.size(), small[0].bytes.size());
  }
  EXPECT_EQ(unique.size(), small.size());
}

// Write-through: blocks committed by a step are copied out when they are committed but handed
// to the tier at the next flush point (the next step here), not one synchronize each; a
// reservation flushes before it returns, since a KV transfer writes its blocks off-stream.
TEST_F(EngineTieringTest, StagedOffloadsWaitForAFlushPointAndAReservationFlushes) {
  auto engine = Make(16);
  std::vector<BlockHash> offloaded;
  engine->SetBlockOffload(
      Engine::OffloadOn::kCommit,
      [&](BlockHash h, BlockHash, std::span<const std::byte>) { offloaded.push_back(h); });
  const auto a = Prompt(33, 7);  // 4 full blocks
  ASSERT_TRUE(engine->AddRequest("a", a, Greedy(4)).ok());
  ASSERT_TRUE(engine->Step().ok());  // the prefill commits 4 blocks; "a" is still running
  EXPECT_TRUE(offloaded.empty());
  EXPECT_EQ(engine->pending_kv_offloads(), 4u);
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(offloaded, HashBlockChain(engine->block_hash_seed(), a, 8));
  EXPECT_EQ(engine->pending_kv_offloads(), 0u);
  while (engine->HasUnfinished()) ASSERT_TRUE(engine->Step().ok());

  // Destroyed with blocks staged: it waits for their copies and hands nothing on (the offload
  // function's target may be gone; the tiers are caches).
  int late = 0;
  auto doomed = Make(16);
  doomed->SetBlockOffload(Engine::OffloadOn::kCommit,
                          [&](BlockHash, BlockHash, std::span<const std::byte>) { ++late; });
  ASSERT_TRUE(doomed->AddRequest("d", a, Greedy(4)).ok());
  ASSERT_TRUE(doomed->Step().ok());
  EXPECT_EQ(doomed->pending_kv_offloads(), 4u);
  doomed.reset();
  EXPECT_EQ(late, 0);

  auto back = Make(12);
  int evicted = 0;
  back->SetBlockOffload(Engine::OffloadOn::kEvict,
                        [&](BlockHash, BlockHash, std::span<const std::byte>) { ++evicted; });
  RunToEnd(*back, "b", Prompt(41, 50));  // leaves 5 cached blocks
  ASSERT_EQ(evicted, 0);
  auto res = back->ReservePrompt(Prompt(8 * 12 - 3, 90));  // every block of the pool
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(evicted, 5);
  EXPECT_EQ(back->pending_kv_offloads(), 0u);
  back->CancelReservation(*res);
}

}  // namespace
}  // namespace strata
