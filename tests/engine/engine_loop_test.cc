// EngineLoop: the engine on its own thread, driven from other threads.
#include "strata/engine/engine_loop.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "absl/synchronization/notification.h"
#include "strata/engine/presets.h"

namespace strata {
namespace {

class EngineLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/strata_engine_loop_test_" +
                           std::to_string(::getpid()));
    ASSERT_TRUE(WritePreset("tiny-llama", *dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::unique_ptr<EngineLoop> Make() {
    EngineOptions opts;
    opts.runner.block_size = 8;
    opts.runner.num_kv_blocks = 64;
    auto e = Engine::Create(*dir_, opts);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::make_unique<EngineLoop>(std::move(*e));
  }
  static std::string* dir_;
};
std::string* EngineLoopTest::dir_ = nullptr;

SamplingParams Greedy(int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

struct Collected {
  absl::Notification done;
  absl::Status status;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

OutputCallback CollectInto(Collected* c) {
  return [c](const absl::Status& st, const RequestOutput& out) {
    if (!st.ok()) {
      c->status = st;
      c->done.Notify();
      return;
    }
    c->tokens.insert(c->tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
    if (out.finished) {
      c->finish = out.finish_reason;
      c->done.Notify();
    }
  };
}

TEST_F(EngineLoopTest, RunsRequestsAndResyncsKvEventsToTheCacheContents) {
  auto loop = Make();
  Collected c;
  std::vector<int32_t> prompt(41);
  for (int i = 0; i < 41; ++i) prompt[i] = 3 + i;
  loop->Submit("a", prompt, Greedy(7), CollectInto(&c));
  ASSERT_TRUE(c.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.tokens.size(), 7u);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  std::set<BlockHash> stored;
  for (const auto& e : loop->TakeKvEvents()) {
    if (e.kind == KvCacheEvent::Kind::kStored) stored.insert(e.hash);
  }
  EXPECT_EQ(stored.size(), 5u);  // 47 tokens have KV (the last sampled one not yet): 5 blocks
  loop->ResyncKvEvents();
  std::set<BlockHash> resent;
  for (int i = 0; i < 200 && resent.empty(); ++i) {
    for (const auto& e : loop->TakeKvEvents()) resent.insert(e.hash);
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(resent, stored);
  EXPECT_EQ(loop->load().free_kv_blocks, 64);
}

TEST_F(EngineLoopTest, AbortReportsAbortAndBadRequestsReportErrors) {
  auto loop = Make();
  Collected bad, aborted;
  loop->Submit("bad", {}, Greedy(4), CollectInto(&bad));
  ASSERT_TRUE(bad.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument);
  loop->Submit("long", std::vector<int32_t>(20, 5), Greedy(400), CollectInto(&aborted));
  absl::SleepFor(absl::Milliseconds(20));
  loop->Abort("long");
  ASSERT_TRUE(aborted.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(aborted.finish, FinishReason::kAbort);
  for (int i = 0; i < 200 && loop->load().running != 0; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(loop->load().running, 0);
  EXPECT_EQ(loop->load().free_kv_blocks, 64);
}

TEST_F(EngineLoopTest, StopFailsOutstandingRequestsWithUnavailable) {
  auto loop = Make();
  Collected c;
  loop->Submit("x", std::vector<int32_t>(20, 5), Greedy(1000), CollectInto(&c));
  absl::SleepFor(absl::Milliseconds(20));
  loop->Stop();
  ASSERT_TRUE(c.done.HasBeenNotified());
  EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(EngineLoopTest, RunOnEngineRunsOnTheEngineThreadThenInlineOnceStopped) {
  auto loop = Make();
  std::thread::id ran_on;
  int calls = 0;
  loop->RunOnEngine([&](Engine&) {
    ran_on = std::this_thread::get_id();
    ++calls;
  });
  EXPECT_EQ(calls, 1);  // done when RunOnEngine returns
  EXPECT_NE(ran_on, std::this_thread::get_id());
  loop->Stop();
  loop->RunOnEngine([&](Engine&) {
    ran_on = std::this_thread::get_id();
    ++calls;
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

}  // namespace
}  // namespace strata
