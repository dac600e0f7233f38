// EngineLoop: the engine on its own thread, driven from other threads.
#include "strata/engine/engine_loop.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
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
  // The resync: CLEARED first (whoever indexes this pool drops what it had), then every block.
  std::vector<KvCacheEvent> resync;
  for (int i = 0; i < 200 && resync.empty(); ++i) {
    resync = loop->TakeKvEvents();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_FALSE(resync.empty());
  EXPECT_EQ(resync.front().kind, KvCacheEvent::Kind::kCleared);
  std::set<BlockHash> resent;
  for (size_t i = 1; i < resync.size(); ++i) {
    EXPECT_EQ(resync[i].kind, KvCacheEvent::Kind::kStored);
    resent.insert(resync[i].hash);
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

// Constraints are compiled on the submitting thread: a bad one is refused before Submit returns
// (the engine thread never sees it); a good one is served and follows its constraint.
TEST_F(EngineLoopTest, ConstraintsAreCompiledBeforeTheEngineThreadSeesThem) {
  auto loop = Make();
  Collected bad;
  SamplingParams p = Greedy(40);
  p.ignore_eos = false;
  p.guided = {GuidedDecoding::Kind::kRegex, "(unclosed"};
  loop->Submit("bad", std::vector<int32_t>(8, 5), p, CollectInto(&bad));
  EXPECT_TRUE(bad.done.HasBeenNotified());
  EXPECT_EQ(bad.status.code(), absl::StatusCode::kInvalidArgument) << bad.status;
  Collected good;
  p.guided = {GuidedDecoding::Kind::kChoice, R"(["yes","no"])"};
  loop->Submit("good", std::vector<int32_t>(8, 5), p, CollectInto(&good));
  ASSERT_TRUE(good.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(good.status.ok()) << good.status;
  EXPECT_EQ(good.finish, FinishReason::kStop);
  std::string text;
  loop->RunOnEngine([&](Engine& e) { text = e.tokenizer().Decode(good.tokens); });
  EXPECT_TRUE(text == "yes" || text == "no") << text;
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

// Polls `loop`'s StallAge for up to `limit` until `pred` holds; returns whether it did.
bool WaitForStallAge(const EngineLoop& loop, const std::function<bool(absl::Duration)>& pred,
                     absl::Duration limit = absl::Seconds(5)) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (pred(loop.StallAge())) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred(loop.StallAge());
}

TEST_F(EngineLoopTest, StallAgeGrowsOnlyWhileAStepOrPostedWorkDoesNotReturn) {
  auto loop = Make();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(loop->StallAge(), absl::ZeroDuration()) << "idle";

  // A posted closure that does not return for a while.
  absl::Notification entered, release;
  loop->Post([&](Engine&) {
    entered.Notify();
    release.WaitForNotification();
  });
  entered.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_GE(loop->StallAge(), absl::Milliseconds(150));
  release.Notify();
  EXPECT_TRUE(WaitForStallAge(*loop, [](absl::Duration d) { return d == absl::ZeroDuration(); }));

  // A long answer whose steps keep returning never looks stalled.
  Collected normal;
  loop->Submit("normal", std::vector<int32_t>(40, 11), Greedy(200), CollectInto(&normal));
  absl::Duration worst = absl::ZeroDuration();
  while (!normal.done.HasBeenNotified()) {
    worst = std::max(worst, loop->StallAge());
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(normal.tokens.size(), 200u);
  EXPECT_LT(worst, absl::Milliseconds(150));
}

TEST_F(EngineLoopTest, StallForTestingSleepsInsideTheStepOfAMarkedRequestOnce) {
  auto loop = Make();
  loop->SetStallForTesting({.marker_token = 7, .after_tokens = 2, .sleep = absl::Seconds(1)});
  Collected marked;
  loop->Submit("marked", {3, 4, 7, 9}, Greedy(6), CollectInto(&marked));
  EXPECT_TRUE(
      WaitForStallAge(*loop, [](absl::Duration d) { return d >= absl::Milliseconds(600); }));
  ASSERT_TRUE(marked.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_TRUE(marked.status.ok()) << marked.status;
  EXPECT_EQ(marked.tokens.size(), 6u);
  EXPECT_TRUE(WaitForStallAge(*loop, [](absl::Duration d) { return d == absl::ZeroDuration(); }));
  // A prompt without the marker runs without a pause.
  Collected plain;
  const absl::Time start = absl::Now();
  loop->Submit("plain", {3, 4, 8, 9}, Greedy(6), CollectInto(&plain));
  ASSERT_TRUE(plain.done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(700));
}

}  // namespace
}  // namespace strata
