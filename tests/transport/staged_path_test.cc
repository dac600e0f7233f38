// The staged path of the Agent: writes into a peer's device memory that this process does not
// map, cut into pieces that are copied out to page-locked host slots, sent over UCX and copied
// in by the peer. Run over the shared-memory stand-in for GPU memory (shm_device_memory.h),
// with small pieces and few slots so that every write is many pieces, pipelined.
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm_device_memory.h"
#include "strata/transport/agent.h"
#include "test_util.h"

namespace strata::transport {
namespace {

using ::testing::HasSubstr;
using testing::PatternByte;
using testing::ShmDeviceMemory;

constexpr size_t kBlock = 4096;
constexpr size_t kBlocks = 256;
constexpr size_t kPool = kBlock * kBlocks;
constexpr size_t kPiece = 3 * kBlock;  // a block run of 4 spans two pieces
constexpr absl::Duration kTimeout = absl::Seconds(20);

AgentOptions Staged(const char* name, DeviceMemory* dev) {
  return testing::StagedOptions(name, dev, kPiece);
}

// Two agents, each with a "device" pool, the writer's filled with a pattern, and the writer's
// import of the receiver's pool. Set the devices' knobs before Connect.
struct AgentPair {
  ShmDeviceMemory dev_a, dev_b;
  std::unique_ptr<Agent> a, b;
  char* src = nullptr;
  char* dst = nullptr;
  uint64_t local = 0, remote = 0;

  void Connect(AgentOptions writer, AgentOptions receiver, int pattern) {
    writer.device = &dev_a;
    receiver.device = &dev_b;
    auto x = Agent::Create(writer);
    auto y = Agent::Create(receiver);
    ASSERT_TRUE(x.ok() && y.ok());
    a = std::move(*x);
    b = std::move(*y);
    src = static_cast<char*>(dev_a.Allocate(kPool));
    dst = static_cast<char*>(dev_b.Allocate(kPool));
    for (size_t i = 0; i < kPool; ++i) src[i] = PatternByte(pattern, i);
    auto ra = a->RegisterMemory(src, kPool, MemoryKind::kDevice);
    auto rb = b->RegisterMemory(dst, kPool, MemoryKind::kDevice);
    ASSERT_TRUE(ra.ok() && rb.ok());
    local = *ra;
    ASSERT_TRUE(a->AddPeer("decode", b->Metadata()).ok());
    auto imported = a->ImportRegion("decode", *b->ExportRegion(*rb));
    ASSERT_TRUE(imported.ok()) << imported.status();
    remote = *imported;
  }
};

class StagedPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = Agent::Create(Staged("prefill", &dev_a_));
    ASSERT_TRUE(a.ok()) << a.status();
    a_ = std::move(*a);
    src_ = static_cast<char*>(dev_a_.Allocate(kPool));
    ASSERT_NE(src_, nullptr);
    for (size_t i = 0; i < kPool; ++i) src_[i] = PatternByte(11, i);
    auto ra = a_->RegisterMemory(src_, kPool, MemoryKind::kDevice);
    ASSERT_TRUE(ra.ok()) << ra.status();
    local_ = *ra;
    MakeReceiver();
  }

  // Imports the current receiver's pool into the current writer.
  void MakeReceiverImport() {
    auto blob = b_->ExportRegion(exported_);
    ASSERT_TRUE(blob.ok()) << blob.status();
    auto remote = a_->ImportRegion("decode", *blob);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *remote;
  }

  // (Re)creates the decode side and imports its pool.
  void MakeReceiver() {
    auto b = Agent::Create(Staged("decode", &dev_b_));
    ASSERT_TRUE(b.ok()) << b.status();
    b_ = std::move(*b);
    dst_ = static_cast<char*>(dev_b_.Allocate(kPool));
    ASSERT_NE(dst_, nullptr);
    auto rb = b_->RegisterMemory(dst_, kPool, MemoryKind::kDevice);
    ASSERT_TRUE(rb.ok()) << rb.status();
    exported_ = *rb;
    ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
    auto blob = b_->ExportRegion(*rb);
    ASSERT_TRUE(blob.ok()) << blob.status();
    auto remote = a_->ImportRegion("decode", *blob);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *remote;
  }

  absl::Status Write(std::span<const transport::Run> runs, std::string note = {}) {
    auto t = a_->PostWrite("decode", local_, remote_, runs, std::move(note));
    if (!t.ok()) return t.status();
    absl::Status s = a_->Wait(*t, kTimeout);
    a_->Release(*t);
    return s;
  }

  bool Landed(size_t src_block, size_t dst_block) const {
    return std::memcmp(src_ + src_block * kBlock, dst_ + dst_block * kBlock, kBlock) == 0;
  }

  std::vector<std::pair<std::string, std::string>> AwaitNotifications(size_t n) {
    std::vector<std::pair<std::string, std::string>> got;
    const absl::Time deadline = absl::Now() + kTimeout;
    while (got.size() < n && absl::Now() < deadline) {
      for (auto& x : b_->TakeNotifications()) got.push_back(std::move(x));
      if (got.size() < n) absl::SleepFor(absl::Milliseconds(1));
    }
    return got;
  }

  ShmDeviceMemory dev_a_, dev_b_;
  std::unique_ptr<Agent> a_, b_;
  char* src_ = nullptr;
  char* dst_ = nullptr;
  uint64_t local_ = 0, remote_ = 0, exported_ = 0;
};

TEST_F(StagedPathTest, StagingChosenByConfigurationMapsNothing) {
  auto path = a_->RegionPath(remote_);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, "staged");
  EXPECT_EQ(dev_a_.opens.load(), 0);
  EXPECT_EQ(a_->Stats().device_regions_mapped, 0u);
  EXPECT_THAT(a_->DevicePaths(), HasSubstr("staged"));
  EXPECT_THAT(a_->DevicePaths(), HasSubstr("CUDA memory support"));
}

TEST_F(StagedPathTest, EveryRunLandsInPiecesAndTheNotificationFollowsTheLast) {
  // Blocks 3..6 -> 100..103 (one run over two pieces), 20 -> 1, 40 -> 255, 7..9 -> 50..52.
  std::vector<transport::Run> runs = {{3 * kBlock, 100 * kBlock, 4 * kBlock},
                           {20 * kBlock, 1 * kBlock, kBlock},
                           {40 * kBlock, 255 * kBlock, kBlock},
                           {7 * kBlock, 50 * kBlock, 3 * kBlock}};
  ASSERT_TRUE(Write(runs, "req-1 done").ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(Landed(3 + i, 100 + i)) << i;
  EXPECT_TRUE(Landed(20, 1));
  EXPECT_TRUE(Landed(40, 255));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(Landed(7 + i, 50 + i)) << i;
  EXPECT_EQ(dst_[0], 0);  // untouched block
  auto got = AwaitNotifications(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], std::make_pair(std::string("prefill"), std::string("req-1 done")));
  // 9 blocks in pieces of 3: exactly 3 pieces, each one copy out and one copy in.
  const AgentStats sa = a_->Stats();
  EXPECT_EQ(sa.staged_pieces_sent, 3u);
  EXPECT_EQ(sa.staged_bytes_sent, 9 * kBlock);
  EXPECT_EQ(sa.bytes_written, 9 * kBlock);
  EXPECT_EQ(sa.notifications_sent, 1u);
  EXPECT_EQ(sa.device_copies, 0u);  // no ipc copies
  EXPECT_EQ(dev_a_.copies.load(), 3);
  const AgentStats sb = b_->Stats();
  EXPECT_EQ(sb.staged_pieces_received, 3u);
  EXPECT_EQ(sb.staged_receive_slots, 2u);  // one chunk of staging_slots
  EXPECT_EQ(sb.staged_receive_slots_busy, 0u);
  EXPECT_EQ(sb.staged_bytes_received, 9 * kBlock);
  EXPECT_EQ(dev_b_.copies.load(), 3);
  // Each side page-locked one pool of host slots.
  EXPECT_EQ(dev_a_.host_registered(), 1u);
  EXPECT_EQ(dev_b_.host_registered(), 1u);
}

TEST_F(StagedPathTest, ManyWritesInFlightShareTwoSlotsAndAllLand) {
  dev_b_.copy_delay_ms = 1;  // the receiver is the slow side: pieces queue for its slots
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 24; ++i) {
    // Each write: 5 scattered blocks (2 pieces).
    std::vector<transport::Run> runs;
    for (size_t k = 0; k < 5; ++k) {
      const size_t from = (i * 5 + k) % kBlocks;
      runs.push_back({from * kBlock, (kBlocks - 1 - from) * kBlock, kBlock});
    }
    auto t = a_->PostWrite("decode", local_, remote_, runs, absl::StrCat("w", i));
    ASSERT_TRUE(t.ok()) << t.status();
    ids.push_back(*t);
  }
  for (uint64_t id : ids) {
    EXPECT_TRUE(a_->Wait(id, kTimeout).ok());
    a_->Release(id);
  }
  for (size_t b = 0; b < 120; ++b) EXPECT_TRUE(Landed(b, kBlocks - 1 - b)) << b;
  auto got = AwaitNotifications(24);
  ASSERT_EQ(got.size(), 24u);
  std::set<std::string> names;
  for (auto& [from, note] : got) names.insert(note);
  EXPECT_EQ(names.size(), 24u);
  EXPECT_EQ(a_->Stats().staged_pieces_sent, 48u);
}

TEST_F(StagedPathTest, ACopyFailureOnEitherSideFailsTheWriteWithItsReason) {
  std::vector<transport::Run> runs = {{0, 0, 4 * kBlock}};
  dev_b_.fail_copies = true;
  absl::Status in = Write(runs, "never");
  EXPECT_FALSE(in.ok());
  EXPECT_THAT(in.message(), HasSubstr("could not apply piece"));
  EXPECT_THAT(in.message(), HasSubstr("injected copy failure"));
  dev_b_.fail_copies = false;
  dev_a_.fail_copies = true;
  absl::Status out = Write(runs, "never");
  EXPECT_EQ(out.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(out.message(), HasSubstr("staging a piece for peer 'decode'"));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(b_->TakeNotifications().empty());  // nothing announced that did not land
  // The failures left every slot free: a whole write that needs both slots goes through.
  dev_a_.fail_copies = false;
  std::vector<transport::Run> big = {{0, 0, 12 * kBlock}};
  ASSERT_TRUE(Write(big, "ok").ok());
  for (size_t i = 0; i < 12; ++i) EXPECT_TRUE(Landed(i, i)) << i;
}

TEST_F(StagedPathTest, RunsAreBoundsCheckedBeforeAnyPieceMoves) {
  std::vector<transport::Run> runs = {{0, 0, kBlock}, {0, kPool - 10, kBlock}};
  auto t = a_->PostWrite("decode", local_, remote_, runs);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dev_a_.copies.load(), 0);
}

TEST(StagedPathFallbackTest, APeerPoolThatCannotBeMappedIsStaged) {
  AgentPair p;
  p.dev_a.refuse_open = true;
  p.Connect({.name = "prefill"}, {.name = "decode"}, 5);
  EXPECT_EQ(*p.a->RegionPath(p.remote), "staged");
  // Default pieces (4 MiB): the whole pool is one piece.
  std::vector<transport::Run> runs = {{0, 0, kPool}};
  auto t = p.a->PostWrite("decode", p.local, p.remote, runs);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(p.a->Wait(*t, kTimeout).ok());
  EXPECT_EQ(std::memcmp(p.src, p.dst, kPool), 0);
  EXPECT_EQ(p.a->Stats().staged_pieces_sent, 1u);
}

// Between hosts UCX has no shared memory: the same pieces over TCP (rendezvous without
// zero-copy gets).
TEST(StagedPathOverTcpTest, PiecesCrossTcpByteExact) {
  AgentPair p;
  setenv("UCX_TLS", "tcp", 1);
  p.Connect(Staged("prefill", nullptr), Staged("decode", nullptr), 3);
  unsetenv("UCX_TLS");
  // Every other block, reversed: 128 runs in 43 pieces.
  std::vector<transport::Run> runs;
  for (size_t i = 0; i < kBlocks; i += 2) runs.push_back({i * kBlock, (kBlocks - 1 - i) * kBlock, kBlock});
  auto t = p.a->PostWrite("decode", p.local, p.remote, runs, "tcp done");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(p.a->Wait(*t, kTimeout).ok());
  for (size_t i = 0; i < kBlocks; i += 2) {
    EXPECT_EQ(std::memcmp(p.src + i * kBlock, p.dst + (kBlocks - 1 - i) * kBlock, kBlock), 0) << i;
  }
  std::vector<std::pair<std::string, std::string>> got;
  const absl::Time deadline = absl::Now() + kTimeout;
  while (got.empty() && absl::Now() < deadline) {
    got = p.b->TakeNotifications();
    if (got.empty()) absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second, "tcp done");
  EXPECT_EQ(p.a->Stats().staged_pieces_sent, 43u);
}

}  // namespace
}  // namespace strata::transport
