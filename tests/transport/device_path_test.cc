// The device path of the Agent (device regions, mapped peer regions, batched copies), run over
// a shared-memory stand-in for GPU memory (shm_device_memory.h).
#include <cstring>
#include <thread>
#include <vector>

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
constexpr size_t kBlocks = 64;
constexpr size_t kPool = kBlock * kBlocks;
constexpr absl::Duration kTimeout = absl::Seconds(10);

class DevicePathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = Agent::Create({.name = "prefill", .device = &dev_a_});
    auto b = Agent::Create({.name = "decode", .device = &dev_b_});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = std::move(*a);
    b_ = std::move(*b);
    src_ = static_cast<char*>(dev_a_.Allocate(kPool));
    dst_ = static_cast<char*>(dev_b_.Allocate(kPool));
    ASSERT_NE(src_, nullptr);
    ASSERT_NE(dst_, nullptr);
    for (size_t i = 0; i < kPool; ++i) src_[i] = PatternByte(7, i);
    auto ra = a_->RegisterMemory(src_, kPool, MemoryKind::kDevice);
    auto rb = b_->RegisterMemory(dst_, kPool, MemoryKind::kDevice);
    ASSERT_TRUE(ra.ok()) << ra.status();
    ASSERT_TRUE(rb.ok()) << rb.status();
    local_ = *ra;
    exported_ = *rb;
    ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
    auto blob = b_->ExportRegion(exported_);
    ASSERT_TRUE(blob.ok()) << blob.status();
    blob_ = *blob;
    auto remote = a_->ImportRegion("decode", blob_);
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

  // Block `src_block` of the source pool landed in block `dst_block` of the destination.
  bool Landed(size_t src_block, size_t dst_block) const {
    return std::memcmp(src_ + src_block * kBlock, dst_ + dst_block * kBlock, kBlock) == 0;
  }

  ShmDeviceMemory dev_a_, dev_b_;
  std::unique_ptr<Agent> a_, b_;
  char* src_ = nullptr;
  char* dst_ = nullptr;
  uint64_t local_ = 0, exported_ = 0, remote_ = 0;
  std::string blob_;
};

TEST_F(DevicePathTest, MappedPeerRegionTakesTheIpcPath) {
  auto path = a_->RegionPath(remote_);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, "ipc");
  EXPECT_EQ(dev_a_.opens.load(), 1);
  EXPECT_EQ(a_->Stats().device_regions_mapped, 1u);
  EXPECT_EQ(a_->RegionPath(remote_ + 1000).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DevicePathTest, OneBatchedCopyMovesEveryRunThenNotifies) {
  // Blocks 3..5 -> 10..12 (one run), 20 -> 1, 40 -> 63.
  std::vector<transport::Run> runs = {{3 * kBlock, 10 * kBlock, 3 * kBlock},
                           {20 * kBlock, 1 * kBlock, kBlock},
                           {40 * kBlock, 63 * kBlock, kBlock}};
  ASSERT_TRUE(Write(runs, "req-1 done").ok());
  EXPECT_TRUE(Landed(3, 10) && Landed(4, 11) && Landed(5, 12));
  EXPECT_TRUE(Landed(20, 1));
  EXPECT_TRUE(Landed(40, 63));
  EXPECT_EQ(dst_[0], 0);  // untouched block
  EXPECT_EQ(dev_a_.copies.load(), 1);
  const AgentStats st = a_->Stats();
  EXPECT_EQ(st.device_copies, 1u);
  EXPECT_EQ(st.device_bytes, 5 * kBlock);
  EXPECT_EQ(st.bytes_written, 5 * kBlock);
  EXPECT_EQ(st.notifications_sent, 1u);
  std::vector<std::pair<std::string, std::string>> got;
  const absl::Time deadline = absl::Now() + kTimeout;
  while (got.empty() && absl::Now() < deadline) {
    got = b_->TakeNotifications();
    if (got.empty()) absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "prefill");
  EXPECT_EQ(got[0].second, "req-1 done");
}

TEST_F(DevicePathTest, WritesCompleteInPostOrder) {
  dev_a_.copy_delay_ms = 5;
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < 8; ++i) {
    transport::Run r{i * kBlock, (kBlocks - 1 - i) * kBlock, kBlock};
    auto t = a_->PostWrite("decode", local_, remote_, std::span<const transport::Run>(&r, 1));
    ASSERT_TRUE(t.ok()) << t.status();
    ids.push_back(*t);
  }
  // Waiting for the last one means every earlier copy has run.
  ASSERT_TRUE(a_->Wait(ids.back(), kTimeout).ok());
  for (uint64_t id : ids) {
    auto st = a_->Check(id);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(*st, TransferState::kDone);
    a_->Release(id);
  }
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(Landed(i, kBlocks - 1 - i)) << i;
}

TEST_F(DevicePathTest, RunsAreBoundsCheckedBeforeAnyCopy) {
  std::vector<transport::Run> runs = {{0, 0, kBlock}, {0, kPool - 10, kBlock}};
  auto t = a_->PostWrite("decode", local_, remote_, runs);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dev_a_.copies.load(), 0);
  EXPECT_EQ(dst_[0], 0);
}

TEST_F(DevicePathTest, ReadsAndHostToDeviceMixesAreRefused) {
  transport::Run r{0, 0, kBlock};
  auto read = a_->PostRead("decode", local_, remote_, std::span<const transport::Run>(&r, 1));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnimplemented);
  std::vector<char> host(kPool);
  auto h = a_->RegisterMemory(host.data(), host.size());
  ASSERT_TRUE(h.ok()) << h.status();
  auto mixed = a_->PostWrite("decode", *h, remote_, std::span<const transport::Run>(&r, 1));
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("host region and a device region"));
}

TEST_F(DevicePathTest, AFailedCopyFailsTheTransferWithItsReason) {
  dev_a_.fail_copies = true;
  transport::Run r{0, 0, kBlock};
  absl::Status s = Write(std::span<const transport::Run>(&r, 1), "never");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("injected copy failure"));
  EXPECT_THAT(s.message(), HasSubstr("decode"));
  EXPECT_EQ(a_->Stats().transfers_failed, 1u);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(b_->TakeNotifications().empty());  // no notification for data that did not land
}

TEST_F(DevicePathTest, ASecondImportOfOneHandleSharesTheMapping) {
  auto again = a_->ImportRegion("decode", blob_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_NE(*again, remote_);
  EXPECT_EQ(dev_a_.opens.load(), 1);
}

TEST_F(DevicePathTest, RemovingThePeerClosesItsMappingAfterTheCopyInFlight) {
  dev_a_.copy_delay_ms = 50;
  transport::Run r{0, 0, kBlock};
  auto t = a_->PostWrite("decode", local_, remote_, std::span<const transport::Run>(&r, 1));
  ASSERT_TRUE(t.ok()) << t.status();
  a_->RemovePeer("decode");
  EXPECT_EQ(dev_a_.closes.load(), 0);  // the queued copy still holds the mapping
  (void)a_->Wait(*t, kTimeout);
  a_->Release(*t);
  const absl::Time deadline = absl::Now() + kTimeout;
  while (dev_a_.closes.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(dev_a_.closes.load(), 1);
  EXPECT_TRUE(Landed(0, 0));
  EXPECT_EQ(a_->RegionPath(remote_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DevicePathTest, DestroyingTheAgentClosesEveryMapping) {
  a_.reset();
  EXPECT_EQ(dev_a_.opens.load(), dev_a_.closes.load());
}

TEST_F(DevicePathTest, AMappingThatCannotBeOpenedTurnsTheImportStaged) {
  dev_a_.refuse_open = true;
  a_->RemovePeer("decode");  // drops the cached mapping
  ASSERT_TRUE(a_->AddPeer("decode", b_->Metadata()).ok());
  auto r = a_->ImportRegion("decode", blob_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*a_->RegionPath(*r), "staged");
}

TEST(DevicePathNoServicesTest, DeviceMemoryNeedsServices) {
  auto a = Agent::Create({.name = "plain"});
  ASSERT_TRUE(a.ok()) << a.status();
  char buf[64];
  auto r = (*a)->RegisterMemory(buf, sizeof(buf), MemoryKind::kDevice);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);

  ShmDeviceMemory dev;
  auto b = Agent::Create({.name = "gpu", .device = &dev});
  ASSERT_TRUE(b.ok()) << b.status();
  void* pool = dev.Allocate(kPool);
  auto region = (*b)->RegisterMemory(pool, kPool, MemoryKind::kDevice);
  ASSERT_TRUE(region.ok()) << region.status();
  auto blob = (*b)->ExportRegion(*region);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE((*a)->AddPeer("gpu", (*b)->Metadata()).ok());
  auto imported = (*a)->ImportRegion("gpu", *blob);
  EXPECT_EQ(imported.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(imported.status().message(), HasSubstr("no device memory services"));
}

TEST(DevicePathNoServicesTest, ExportingMemoryThatIsNotAnAllocationFails) {
  ShmDeviceMemory dev;
  auto a = Agent::Create({.name = "gpu", .device = &dev});
  ASSERT_TRUE(a.ok()) << a.status();
  char buf[64];
  auto r = (*a)->RegisterMemory(buf, sizeof(buf), MemoryKind::kDevice);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::transport
