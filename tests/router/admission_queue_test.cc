// AdmissionQueue without HTTP: a fake cluster of `free_slots` decides whether a try places;
// time is passed in by hand, so every case is exact.
#include "strata/router/admission_queue.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "strata/router/placement.h"

namespace strata::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A placement error that says waiting can meet the SLO: min TTFT once capacity frees.
absl::Status Waitable(double min_ttft, double retry_after = 2) {
  absl::Status s = absl::ResourceExhaustedError("no worker can meet the SLO");
  s.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(retry_after)));
  s.SetPayload(kMinTtftPayload, absl::Cord(absl::StrCat(min_ttft)));
  return s;
}

absl::Status Hopeless() {
  absl::Status s = absl::ResourceExhaustedError("no worker can meet the SLO, waiting or not");
  s.SetPayload(kRetryAfterPayload, absl::Cord("5"));
  return s;
}

struct Outcome {
  std::string what;  // "placed", "rejected:<reason>", "" (still waiting or removed)
  absl::Status status;
};

class Observer final : public AdmissionObserver {
 public:
  void OnLeft(double waited_s) override { waited.push_back(waited_s); }
  void OnRejected(AdmissionReject reason) override {
    rejected.push_back(AdmissionRejectName(reason));
  }
  std::vector<double> waited;
  std::vector<std::string> rejected;
};

class AdmissionQueueTest : public ::testing::Test {
 protected:
  AdmissionQueue& Queue(AdmissionOptions o) {
    queue_ = std::make_unique<AdmissionQueue>(o, &observer_);
    return *queue_;
  }

  // Offers request `id` (arrival `now`, TTFT target `target`) after a failed placement.
  AdmissionQueue::Ticket Offer(int id, double now, double target, absl::Status error) {
    if (outcomes_.size() <= size_t(id)) outcomes_.resize(id + 1);
    AdmissionWaiter w;
    w.deadline_s = now + target;
    w.try_place = [this, id]() -> absl::Status {
      ++tries_;
      if (free_slots_ <= 0) return next_error_;
      --free_slots_;
      outcomes_[id].what = "placed";
      placed_order_.push_back(id);
      return absl::OkStatus();
    };
    w.reject = [this, id](AdmissionReject reason, const absl::Status& status) {
      EXPECT_EQ(outcomes_[id].what, "") << "request " << id << " finished twice";
      outcomes_[id] = {absl::StrCat("rejected:", AdmissionRejectName(reason)), status};
    };
    return queue_->Offer(now, error, std::move(w));
  }

  Observer observer_;
  std::unique_ptr<AdmissionQueue> queue_;
  std::vector<Outcome> outcomes_;
  std::vector<int> placed_order_;
  int free_slots_ = 0;
  int tries_ = 0;
  absl::Status next_error_ = Waitable(0.5);
};

TEST_F(AdmissionQueueTest, PlacesLeastSlackFirstWhenCapacityFrees) {
  Queue({.capacity = 256});
  // Latest starts: #0 10 - 1 = 9, #1 4 - 1 = 3, #2 6 - 0.5 = 5.5, #3 4 - 1 = 3 (ties: ticket).
  EXPECT_NE(Offer(0, 0, 10, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_NE(Offer(1, 0, 4, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_NE(Offer(2, 0, 6, Waitable(0.5)), AdmissionQueue::kNoTicket);
  EXPECT_NE(Offer(3, 0, 4, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_EQ(queue_->size(), 4);
  EXPECT_EQ(queue_->NextExpiry(), 3.0);

  queue_->Wake(1);  // no capacity: everyone keeps waiting
  EXPECT_TRUE(placed_order_.empty());
  EXPECT_EQ(queue_->size(), 4);

  free_slots_ = 1;
  queue_->Wake(1.5);
  EXPECT_THAT(placed_order_, ElementsAre(1));
  free_slots_ = 3;
  queue_->Wake(2);
  EXPECT_THAT(placed_order_, ElementsAre(1, 3, 2, 0));
  EXPECT_EQ(queue_->size(), 0);
  EXPECT_FALSE(queue_->NextExpiry().has_value());
  EXPECT_THAT(observer_.waited, ElementsAre(1.5, 2, 2, 2));
  EXPECT_TRUE(observer_.rejected.empty());
}

TEST_F(AdmissionQueueTest, SlackRunningOutWhileWaitingRejectsWithRetryAfter) {
  Queue({.capacity = 256});
  Offer(0, 0, 2, Waitable(0.5));  // latest start 1.5
  Offer(1, 0, 5, Waitable(0.5));  // latest start 4.5
  queue_->Wake(1.5);              // exactly at the latest start: still in time
  EXPECT_EQ(queue_->size(), 2);
  queue_->Wake(1.6);
  EXPECT_EQ(outcomes_[0].what, "rejected:slack_expired");
  EXPECT_EQ(outcomes_[0].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(outcomes_[0].status.message(), HasSubstr("slack"));
  EXPECT_EQ(RetryAfterSeconds(outcomes_[0].status), 1.0);
  EXPECT_EQ(queue_->size(), 1);
  EXPECT_EQ(queue_->NextExpiry(), 4.5);
  EXPECT_THAT(observer_.rejected, ElementsAre("slack_expired"));
  EXPECT_THAT(observer_.waited, ElementsAre(::testing::DoubleNear(1.6, 1e-12)));
}

TEST_F(AdmissionQueueTest, ARetryThatPredictsTooLateRejectsAndOneThatCannotWaitIsSlo) {
  Queue({.capacity = 256});
  Offer(0, 0, 3, Waitable(0.5));
  Offer(1, 0, 4, Waitable(0.5));
  next_error_ = Waitable(2.5);  // the next try predicts a TTFT of 2.5 s once capacity frees
  queue_->Wake(1);              // #0: 3 - 2.5 < 1, out of slack; #1: 4 - 2.5 >= 1, re-keyed
  EXPECT_EQ(outcomes_[0].what, "rejected:slack_expired");
  EXPECT_EQ(RetryAfterSeconds(outcomes_[0].status), 2.0);  // the placement's own hint
  EXPECT_EQ(queue_->NextExpiry(), 1.5);
  next_error_ = Hopeless();
  queue_->Wake(1.2);
  EXPECT_EQ(outcomes_[1].what, "rejected:slo");
  EXPECT_EQ(outcomes_[1].status, Hopeless());  // answered with the placement's error
  EXPECT_EQ(queue_->size(), 0);
}

TEST_F(AdmissionQueueTest, OfferRejectsAtOnceWhenWaitingCannotHelpOrTheQueueIsFull) {
  Queue({.capacity = 2});
  EXPECT_EQ(Offer(0, 0, 2, Hopeless()), AdmissionQueue::kNoTicket);
  EXPECT_EQ(outcomes_[0].what, "rejected:slo");
  EXPECT_EQ(Offer(1, 0, 2, Waitable(3)), AdmissionQueue::kNoTicket);  // 3 s > the 2 s target
  EXPECT_EQ(outcomes_[1].what, "rejected:slo");
  EXPECT_NE(Offer(2, 0, 2, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_NE(Offer(3, 0, 2, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_EQ(Offer(4, 0, 2, Waitable(1, 7)), AdmissionQueue::kNoTicket);
  EXPECT_EQ(outcomes_[4].what, "rejected:queue_full");
  EXPECT_EQ(outcomes_[4].status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(outcomes_[4].status.message(), HasSubstr("queue is full"));
  EXPECT_EQ(RetryAfterSeconds(outcomes_[4].status), 7.0);
  EXPECT_THAT(observer_.rejected, ElementsAre("slo", "slo", "queue_full"));
  EXPECT_TRUE(observer_.waited.empty());  // none of them waited
}

TEST_F(AdmissionQueueTest, CapacityZeroIsTheOldImmediateRejection) {
  Queue({.capacity = 0});
  EXPECT_EQ(Offer(0, 0, 10, Waitable(1)), AdmissionQueue::kNoTicket);
  EXPECT_EQ(outcomes_[0].what, "rejected:slo");
  EXPECT_EQ(outcomes_[0].status, Waitable(1));
  EXPECT_EQ(queue_->size(), 0);
}

TEST_F(AdmissionQueueTest, RemoveTakesAWaitingRequestOutWithoutACallback) {
  Queue({.capacity = 256});
  const auto t0 = Offer(0, 0, 5, Waitable(1));
  Offer(1, 0, 5, Waitable(1));
  EXPECT_TRUE(queue_->Remove(t0));
  EXPECT_FALSE(queue_->Remove(t0));
  EXPECT_FALSE(queue_->Remove(12345));
  free_slots_ = 5;
  queue_->Wake(1);
  EXPECT_EQ(outcomes_[0].what, "");
  EXPECT_THAT(placed_order_, ElementsAre(1));
  EXPECT_EQ(observer_.waited.size(), 2u);
}

TEST_F(AdmissionQueueTest, RemoveDuringATryDropsTheRequestWhenTheTryFails) {
  Queue({.capacity = 256});
  AdmissionQueue::Ticket ticket = 0;
  bool rejected = false;
  AdmissionWaiter w;
  w.deadline_s = 10;
  w.try_place = [&]() -> absl::Status {
    EXPECT_TRUE(queue_->Remove(ticket));  // the client leaves while the router places it
    return Waitable(1);
  };
  w.reject = [&](AdmissionReject, const absl::Status&) { rejected = true; };
  ticket = queue_->Offer(0, Waitable(1), std::move(w));
  queue_->Wake(1);
  EXPECT_FALSE(rejected);
  EXPECT_EQ(queue_->size(), 0);
  EXPECT_FALSE(queue_->Remove(ticket));
}

TEST_F(AdmissionQueueTest, AWakeFromACallbackRunsAfterTheCurrentOneInsteadOfDeadlocking) {
  Queue({.capacity = 256});
  int tries = 0;
  AdmissionWaiter w;
  w.deadline_s = 10;
  w.try_place = [&]() -> absl::Status {
    if (++tries == 1) {
      queue_->Wake(2);  // e.g. a first token arriving on this thread
      return Waitable(1);
    }
    return absl::OkStatus();
  };
  w.reject = [](AdmissionReject, const absl::Status&) { FAIL(); };
  queue_->Offer(0, Waitable(1), std::move(w));
  queue_->Wake(1);
  EXPECT_EQ(tries, 2);  // the nested wake made the first one go round again
  EXPECT_EQ(queue_->size(), 0);
}

TEST_F(AdmissionQueueTest, AWakeStopsAfterEnoughFailures) {
  Queue({.capacity = 100, .max_failures_per_wake = 3});
  for (int i = 0; i < 10; ++i) Offer(i, 0, 10, Waitable(1));
  queue_->Wake(1);
  EXPECT_EQ(tries_, 3);
  EXPECT_EQ(queue_->size(), 10);
}

TEST_F(AdmissionQueueTest, RejectAllAnswersEveryWaitingRequest) {
  Queue({.capacity = 256});
  Offer(0, 0, 10, Waitable(1));
  Offer(1, 0, 10, Waitable(1));
  queue_->RejectAll(absl::UnavailableError("draining"));
  EXPECT_EQ(outcomes_[0].what, "rejected:shutdown");
  EXPECT_EQ(outcomes_[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(queue_->size(), 0);
}

// Random offers, wakes, removals and capacity changes: every request ends exactly once, in
// placed, rejected or removed, and nothing stays behind.
TEST_F(AdmissionQueueTest, NoRequestIsLostOrFinishedTwice) {
  Queue({.capacity = 16, .max_failures_per_wake = 4});
  std::mt19937 rng(11);
  std::vector<AdmissionQueue::Ticket> tickets;
  std::vector<bool> removed;
  double now = 0;
  constexpr int kRequests = 500;
  for (int id = 0; id < kRequests; ++id) {
    now += 0.01 * (rng() % 10);
    next_error_ = rng() % 5 == 0 ? Hopeless() : Waitable(0.1 * (rng() % 10));
    tickets.push_back(Offer(id, now, 0.5 + 0.1 * (rng() % 20), next_error_));
    removed.push_back(false);
    if (rng() % 4 == 0) free_slots_ += rng() % 3;
    if (rng() % 3 == 0) queue_->Wake(now);
    if (rng() % 6 == 0) {
      const int victim = rng() % (id + 1);
      if (queue_->Remove(tickets[victim])) removed[victim] = true;
    }
  }
  free_slots_ = 0;
  queue_->RejectAll(absl::UnavailableError("stop"));
  EXPECT_EQ(queue_->size(), 0);
  int placed = 0, rejected = 0, gone = 0;
  for (int id = 0; id < kRequests; ++id) {
    const std::string& what = outcomes_[id].what;
    if (removed[id]) {
      EXPECT_EQ(what, "") << id;
      ++gone;
    } else {
      EXPECT_NE(what, "") << "request " << id << " was lost";
      (what == "placed" ? placed : rejected)++;
    }
  }
  EXPECT_GT(placed, 0);
  EXPECT_GT(gone, 0);
  EXPECT_EQ(placed + rejected + gone, kRequests);
  for (const char* r : {"slo", "queue_full", "slack_expired", "shutdown"}) {
    EXPECT_THAT(observer_.rejected, ::testing::Contains(std::string(r)));
  }
}

}  // namespace
}  // namespace strata::router
