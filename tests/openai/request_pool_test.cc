// openai::internal::RequestPool: the threads that parse and tokenize API requests off the HTTP
// I/O threads. Tasks run on its threads; the queue is bounded (Submit refuses past it); a pool
// destroyed with tasks still queued hands each to its `dropped` so every client gets an answer.
#include "openai/src/request_pool.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace strata::openai::internal {
namespace {

TEST(RequestPoolTest, TasksRunOffTheSubmittingThread) {
  RequestPool pool(2, 16);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> ran{0}, elsewhere{0};
  absl::Notification done;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(pool.Submit({[&] {
                               elsewhere += std::this_thread::get_id() != caller;
                               if (++ran == 10) done.Notify();
                             },
                             nullptr}));
  }
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(elsewhere.load(), 10);
}

TEST(RequestPoolTest, TheQueueIsBoundedAndQueuedTasksAreDroppedAtDestruction) {
  absl::Notification started, release;
  std::atomic<int> runs{0}, drops{0};
  auto pool = std::make_unique<RequestPool>(1, 2);
  ASSERT_TRUE(pool->Submit({[&] {
                              started.Notify();
                              release.WaitForNotification();
                              ++runs;
                            },
                            [&] { ++drops; }}));
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The one thread is busy: two may wait, the third is refused.
  EXPECT_TRUE(pool->Submit({[&] { ++runs; }, [&] { ++drops; }}));
  EXPECT_TRUE(pool->Submit({[&] { ++runs; }, [&] { ++drops; }}));
  EXPECT_FALSE(pool->Submit({[&] { ++runs; }, [&] { ++drops; }}));
  std::thread destroy([&] { pool.reset(); });
  absl::SleepFor(absl::Milliseconds(200));  // the destructor has begun: it waits for the thread
  release.Notify();  // the running task finishes; the queued ones are not started
  destroy.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(drops.load(), 2);
}

}  // namespace
}  // namespace strata::openai::internal
