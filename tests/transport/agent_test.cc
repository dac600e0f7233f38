// Two agents in one process: data movement, notifications, errors.
#include "strata/transport/agent.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace strata::transport {
namespace {

using ::testing::HasSubstr;
using testing::PatternByte;

constexpr size_t kRegionBytes = 24u << 20;
constexpr absl::Duration kTimeout = absl::Seconds(10);

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = Agent::Create({.name = "prefill"});
    auto b = Agent::Create({.name = "decode"});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = std::move(*a);
    b_ = std::move(*b);
    src_.resize(kRegionBytes);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = PatternByte(1, i);
    dst_.assign(kRegionBytes, 0);
    auto ra = a_->RegisterMemory(src_.data(), src_.size());
    auto rb = b_->RegisterMemory(dst_.data(), dst_.size());
    ASSERT_TRUE(ra.ok()) << ra.status();
    ASSERT_TRUE(rb.ok()) << rb.status();
    local_ = *ra;
    exported_ = *rb;
    ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
    auto blob = b_->ExportRegion(*rb);
    ASSERT_TRUE(blob.ok()) << blob.status();
    auto remote = a_->ImportRegion("decode", *blob);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *remote;
  }

  // Posts, waits and releases one write; returns its final status.
  absl::Status Write(std::span<const transport::Run> runs, std::string note = {}) {
    auto t = a_->PostWrite("decode", local_, remote_, runs, std::move(note));
    if (!t.ok()) return t.status();
    absl::Status s = a_->Wait(*t, kTimeout);
    a_->Release(*t);
    return s;
  }

  // Polls the receiver (only TakeNotifications) until `count` notifications arrived.
  std::vector<std::pair<std::string, std::string>> AwaitNotifications(size_t count) {
    std::vector<std::pair<std::string, std::string>> got;
    const absl::Time deadline = absl::Now() + kTimeout;
    while (got.size() < count && absl::Now() < deadline) {
      for (auto& n : b_->TakeNotifications()) got.push_back(std::move(n));
      if (got.size() < count) absl::SleepFor(absl::Milliseconds(1));
    }
    return got;
  }

  std::unique_ptr<Agent> a_, b_;
  std::vector<char> src_, dst_;
  uint64_t local_ = 0, remote_ = 0, exported_ = 0;
};

// Non-contiguous runs of 1 B .. 8 MiB land exactly where asked and nowhere else.
TEST_F(AgentTest, WriteRunsExactBytes) {
  const std::vector<transport::Run> runs = {
      {0, 100, 1},
      {7, 4099, 4095},
      {65536, 1u << 20, (1u << 16) + 7},
      {3u << 20, 12u << 20, 8u << 20},
      {kRegionBytes - 513, kRegionBytes - 513, 513},
  };
  ASSERT_TRUE(Write(runs).ok());
  std::vector<char> expected(kRegionBytes, 0);
  for (const transport::Run& r : runs) {
    std::memcpy(expected.data() + r.remote_offset, src_.data() + r.local_offset, r.length);
  }
  EXPECT_TRUE(dst_ == expected);
  AgentStats stats = a_->Stats();
  uint64_t total = 0;
  for (const transport::Run& r : runs) total += r.length;
  EXPECT_EQ(stats.bytes_written, total);
  EXPECT_EQ(stats.transfers_done, 1u);
}

TEST_F(AgentTest, ReadBack) {
  const std::vector<transport::Run> runs = {{0, 0, 5u << 20}};
  ASSERT_TRUE(Write(runs).ok());
  // Read the remote bytes back into a different place of the local region.
  std::fill(src_.begin() + (8u << 20), src_.begin() + (16u << 20), 0);
  const std::vector<transport::Run> back = {{8u << 20, 1000, 3u << 20}, {(12u << 20) + 1, 17, 1}};
  auto t = a_->PostRead("decode", local_, remote_, back);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(a_->Wait(*t, kTimeout).ok());
  a_->Release(*t);
  for (const transport::Run& r : back) {
    for (uint64_t i = 0; i < r.length; ++i) {
      ASSERT_EQ(src_[r.local_offset + i], PatternByte(1, r.remote_offset + i)) << i;
    }
  }
  EXPECT_EQ(a_->Stats().bytes_read, (3u << 20) + 1);
}

// The receiver only calls TakeNotifications; the sender never calls Check or Wait, so its
// progress thread must drive the flush and the notification. Data is there on arrival.
TEST_F(AgentTest, NotificationArrivesAfterData) {
  const std::vector<transport::Run> runs = {{0, 4096, 6u << 20}, {7u << 20, 9u << 20, 1234567}};
  auto t = a_->PostWrite("decode", local_, remote_, runs, "req-42 done");
  ASSERT_TRUE(t.ok()) << t.status();
  auto got = AwaitNotifications(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "prefill");
  EXPECT_EQ(got[0].second, "req-42 done");
  for (const transport::Run& r : runs) {
    EXPECT_EQ(std::memcmp(dst_.data() + r.remote_offset, src_.data() + r.local_offset, r.length),
              0);
  }
  absl::StatusOr<TransferState> state;
  const absl::Time deadline = absl::Now() + kTimeout;
  do {
    state = a_->Check(*t);
  } while (state.ok() && *state == TransferState::kInProgress && absl::Now() < deadline);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, TransferState::kDone);
  a_->Release(*t);
  EXPECT_EQ(b_->Stats().notifications_received, 1u);
}

TEST_F(AgentTest, NotificationsKeepOrderAndPureNotification) {
  for (int i = 0; i < 5; ++i) {
    const std::vector<transport::Run> runs = {{uint64_t(i) * 4096, uint64_t(i) * 4096, 4096}};
    ASSERT_TRUE(Write(runs, "n" + std::to_string(i)).ok());
  }
  ASSERT_TRUE(Write({}, "bare").ok());
  auto got = AwaitNotifications(6);
  ASSERT_EQ(got.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[i].second, "n" + std::to_string(i));
  EXPECT_EQ(got[5].second, "bare");
  EXPECT_TRUE(b_->TakeNotifications().empty());
}

TEST_F(AgentTest, BoundsViolationsRejected) {
  const uint64_t kMax = std::numeric_limits<uint64_t>::max();
  const std::vector<std::vector<transport::Run>> bad = {
      {{0, 0, 0}},                                  // empty run
      {{kRegionBytes - 10, 0, 11}},                 // past the local end
      {{0, kRegionBytes - 10, 11}},                 // past the remote end
      {{0, kRegionBytes + 1, 1}},                   // remote offset beyond
      {{kMax, 0, 2}},                               // would overflow
      {{0, 8, kMax}},                               // would overflow
      {{0, 0, 16}, {0, kRegionBytes, 1}},           // second run bad: nothing is posted
  };
  for (const auto& runs : bad) {
    auto t = a_->PostWrite("decode", local_, remote_, runs);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
    auto r = a_->PostRead("decode", local_, remote_, runs);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  EXPECT_TRUE(std::all_of(dst_.begin(), dst_.begin() + 64, [](char c) { return c == 0; }));
  EXPECT_EQ(a_->PostWrite("decode", local_, remote_, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AgentTest, UnknownPeerRegionTransfer) {
  const std::vector<transport::Run> runs = {{0, 0, 8}};
  auto s = a_->PostWrite("nobody", local_, remote_, runs).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nobody"));
  EXPECT_EQ(a_->PostWrite("decode", 999, remote_, runs).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(a_->PostWrite("decode", local_, 999, runs).status().code(),
            absl::StatusCode::kNotFound);
  auto blob = b_->ExportRegion(exported_);
  ASSERT_TRUE(blob.ok());
  EXPECT_EQ(a_->ImportRegion("nobody", *blob).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(b_->ExportRegion(12345).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a_->Check(777).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a_->Wait(777, absl::Seconds(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a_->DeregisterMemory(4242).code(), absl::StatusCode::kNotFound);
  a_->Release(777);  // unknown ids are ignored
}

TEST_F(AgentTest, MalformedInputsAndOptions) {
  EXPECT_EQ(a_->AddPeer("x", "garbage").code(), absl::StatusCode::kInvalidArgument);
  std::string meta = b_->Metadata();
  EXPECT_EQ(a_->AddPeer("x", meta.substr(0, meta.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->ImportRegion("decode", "garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Agent::Create({.name = "x", .backend = "carrier-pigeon"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Agent::Create({.name = ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->RegisterMemory(nullptr, 10).status().code(), absl::StatusCode::kInvalidArgument);
}

// A remote region belongs to the endpoint it was imported on.
TEST_F(AgentTest, RegionsArePerPeerAndDieWithThePeer) {
  auto c = Agent::Create({.name = "other"});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(a_->AddPeer("other", (*c)->Metadata()).ok());
  const std::vector<transport::Run> runs = {{0, 0, 8}};
  EXPECT_EQ(a_->PostWrite("other", local_, remote_, runs).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Same metadata again: idempotent, regions survive.
  ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
  EXPECT_TRUE(Write(runs).ok());
  // Removed: the name and its regions are gone; re-adding needs a fresh import.
  a_->RemovePeer("decode");
  EXPECT_EQ(a_->PostWrite("decode", local_, remote_, runs).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
  EXPECT_EQ(a_->PostWrite("decode", local_, remote_, runs).status().code(),
            absl::StatusCode::kNotFound);
  auto blob = b_->ExportRegion(exported_);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto fresh = a_->ImportRegion("decode", *blob);
  ASSERT_TRUE(fresh.ok());
  remote_ = *fresh;
  EXPECT_TRUE(Write(runs).ok());
}

// Completion observed through Check() alone; Release of an in-flight transfer is allowed.
TEST_F(AgentTest, CheckOnlyAndReleaseInFlight) {
  const std::vector<transport::Run> runs = {{0, 0, 4u << 20}};
  auto t = a_->PostWrite("decode", local_, remote_, runs);
  ASSERT_TRUE(t.ok());
  absl::StatusOr<TransferState> state;
  const absl::Time deadline = absl::Now() + kTimeout;
  while ((state = a_->Check(*t)).ok() && *state != TransferState::kDone &&
         absl::Now() < deadline) {
  }
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, TransferState::kDone);
  a_->Release(*t);
  EXPECT_EQ(a_->Check(*t).status().code(), absl::StatusCode::kNotFound);
  auto u = a_->PostWrite("decode", local_, remote_, runs, "after-release");
  ASSERT_TRUE(u.ok());
  a_->Release(*u);
  ASSERT_EQ(AwaitNotifications(1).size(), 1u);
}

// A target region UCX allocated (shared memory on one host): write, read back, verify.
TEST_F(AgentTest, AllocatedTargetRegion) {
  auto allocated = b_->AllocateMemory(3u << 20);
  ASSERT_TRUE(allocated.ok()) << allocated.status();
  ASSERT_GE(allocated->length, 3u << 20);
  char* mem = static_cast<char*>(allocated->addr);
  std::memset(mem, 0, allocated->length);
  auto blob = b_->ExportRegion(allocated->region);
  ASSERT_TRUE(blob.ok());
  auto remote = a_->ImportRegion("decode", *blob);
  ASSERT_TRUE(remote.ok());
  remote_ = *remote;
  const std::vector<transport::Run> runs = {{100, 0, 1u << 20}, {5, (2u << 20) + 3, 777}};
  ASSERT_TRUE(Write(runs, "alloc").ok());
  ASSERT_EQ(AwaitNotifications(1).size(), 1u);
  EXPECT_EQ(std::memcmp(mem, src_.data() + 100, 1u << 20), 0);
  EXPECT_EQ(std::memcmp(mem + (2u << 20) + 3, src_.data() + 5, 777), 0);
  EXPECT_EQ(mem[(1u << 20)], 0);
  std::memset(src_.data(), 0, 4096);
  auto t = a_->PostRead("decode", local_, remote_, std::vector<transport::Run>{{0, 0, 4096}});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(a_->Wait(*t, kTimeout).ok());
  EXPECT_EQ(std::memcmp(src_.data(), mem, 4096), 0);
  EXPECT_TRUE(b_->DeregisterMemory(allocated->region).ok());
  EXPECT_EQ(b_->AllocateMemory(0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Many threads posting on one agent at once, disjoint destinations.
TEST_F(AgentTest, ConcurrentPosters) {
  constexpr int kThreads = 4, kPerThread = 16;
  constexpr uint64_t kChunk = 64 << 10;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t off = (uint64_t(th) * kPerThread + i) * kChunk;
        const std::vector<transport::Run> runs = {{off, off, kChunk}};
        if (!Write(runs).ok()) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  const size_t n = kThreads * kPerThread * kChunk;
  EXPECT_EQ(std::memcmp(dst_.data(), src_.data(), n), 0);
  EXPECT_EQ(a_->Stats().transfers_done, uint64_t(kThreads * kPerThread));
}

}  // namespace
}  // namespace strata::transport
