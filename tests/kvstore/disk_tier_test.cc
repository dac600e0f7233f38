// G3 disk tier: behaviour through the Tier contract, on an in-memory Env (fast, no disk) and,
// where the bytes on disk or O_DIRECT matter, on a real temporary directory
// (disk_tier_file_test.cc).
#include "strata/kvstore/disk_tier.h"

#include <algorithm>
#include <set>
#include <thread>

#include "disk_test_util.h"
#include "disk_tier_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::kvstore {
namespace {

using ::strata::kvstore::testing::FailingWritesEnv;
using ::strata::kvstore::testing::MakeBlock;
using ::testing::UnorderedElementsAre;

constexpr size_t kBlock = 16 << 10;

class DiskTierTest : public ::testing::Test {
 protected:
  DiskTierTest() : env_(rocksdb::NewMemEnv(rocksdb::Env::Default())) {}

  DiskTierOptions Options(int64_t capacity_blocks) {
    DiskTierOptions o;
    o.path = "/strata-disk-test";
    o.block_bytes = kBlock;
    o.capacity_bytes = capacity_blocks * static_cast<int64_t>(kBlock);
    o.env = env_.get();
    return o;
  }
  std::unique_ptr<DiskTier> Open(const DiskTierOptions& o) {
    auto tier = DiskTier::Create(o);
    EXPECT_TRUE(tier.ok()) << tier.status();
    if (!tier.ok()) return nullptr;
    (*tier)->SetEventListener([this](const TierEvent& e) { events_.push_back(e); });
    return *std::move(tier);
  }
  static absl::Status PutBlock(Tier& tier, BlockHash hash, BlockHash parent = kRootBlockHash) {
    return tier.Put({hash, parent}, MakeBlock(hash, kBlock));
  }
  static void ExpectBlock(Tier& tier, BlockHash hash) {
    std::vector<std::byte> got(kBlock);
    ASSERT_TRUE(tier.Get(hash, got).ok()) << hash;
    EXPECT_TRUE(got == MakeBlock(hash, kBlock)) << hash;
  }
  int CountEvents(TierEvent::Kind kind) const {
    return static_cast<int>(std::count_if(events_.begin(), events_.end(),
                                          [&](const TierEvent& e) { return e.kind == kind; }));
  }

  std::unique_ptr<rocksdb::Env> env_;
  std::vector<TierEvent> events_;
};

TEST_F(DiskTierTest, PutGetRoundTrip) {
  auto tier = Open(Options(8));
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->kind(), TierKind::kDisk);
  ASSERT_TRUE(PutBlock(*tier, 11).ok());
  ASSERT_TRUE(PutBlock(*tier, 12, 11).ok());
  ASSERT_TRUE(PutBlock(*tier, 12, 11).ok());  // present: OK, not counted again
  ExpectBlock(*tier, 11);
  ExpectBlock(*tier, 12);
  EXPECT_TRUE(tier->Contains(12));
  const BlockHash chain[] = {11, 12, 13};
  EXPECT_EQ(tier->CountPrefix(chain), 2);
  TierStats s = tier->stats();
  EXPECT_EQ(s.puts, 2);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.bytes_in, 2 * static_cast<int64_t>(kBlock));
  EXPECT_EQ(s.bytes_out, 2 * static_cast<int64_t>(kBlock));
  std::vector<std::byte> dst(kBlock);
  EXPECT_EQ(tier->Get(99, dst).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->stats().misses, 1);
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_EQ(events_[1].kind, TierEvent::Kind::kStored);
  EXPECT_EQ(events_[1].tier, TierKind::kDisk);
  EXPECT_EQ(events_[1].hash, 12u);
  EXPECT_EQ(events_[1].parent, 11u);
}

TEST_F(DiskTierTest, WrongSizesAreInvalidArgument) {
  auto tier = Open(Options(4));
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> small(kBlock - 1), big(kBlock + 1);
  EXPECT_EQ(tier->Put({1, 0}, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Put({1, 0}, big).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  EXPECT_EQ(tier->Get(1, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->usage().blocks, 1);
}

TEST_F(DiskTierTest, BoundedCapacityEvictsLeastRecentlyUsed) {
  auto tier = Open(Options(4));
  ASSERT_NE(tier, nullptr);
  for (BlockHash h = 1; h <= 4; ++h) ASSERT_TRUE(PutBlock(*tier, h).ok());
  ExpectBlock(*tier, 1);  // 1 becomes the most recent; 2 is next to go
  for (BlockHash h = 5; h <= 10; ++h) {
    ASSERT_TRUE(PutBlock(*tier, h).ok());
    TierUsage u = tier->usage();
    EXPECT_LE(u.blocks, 4);
    EXPECT_LE(u.bytes, u.capacity_bytes);
  }
  EXPECT_EQ(tier->usage().capacity_bytes, 4 * static_cast<int64_t>(kBlock));
  for (BlockHash h : {7, 8, 9, 10}) ExpectBlock(*tier, h);
  for (BlockHash h : {1, 2, 3, 4, 5, 6}) EXPECT_FALSE(tier->Contains(h)) << h;
  EXPECT_EQ(tier->stats().evictions, 6);
  EXPECT_EQ(CountEvents(TierEvent::Kind::kStored), 10);
  EXPECT_EQ(CountEvents(TierEvent::Kind::kRemoved), 6);
}

// Evicted blocks' slots are reused: the data file never needs more than capacity + spare slots,
// in both the logged and the unlogged mode (where a slot waits for the next index flush).
TEST_F(DiskTierTest, SlotsOfEvictedBlocksAreReused) {
  for (DiskSyncMode mode : {DiskSyncMode::kWal, DiskSyncMode::kNoWal}) {
    DiskTierOptions o = Options(4);
    o.path += std::to_string(static_cast<int>(mode));
    o.sync = mode;
    o.write_buffer_bytes = 2 * kBlock;  // kNoWal: 2 spare slots, index flush every 2 Puts
    const uint64_t slots = mode == DiskSyncMode::kWal ? 5 : 6;
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    std::set<uint64_t> offsets;
    for (BlockHash h = 1; h <= 40; ++h) {
      ASSERT_TRUE(PutBlock(*tier, h).ok()) << h;
      auto offset = tier->SlotOffsetForTest(h);
      ASSERT_TRUE(offset.ok());
      offsets.insert(*offset);
      ASSERT_LT(*offset, slots * disk_internal::SlotBytes(kBlock)) << h;
    }
    EXPECT_EQ(offsets.size(), slots);
    for (BlockHash h : {37, 38, 39, 40}) ExpectBlock(*tier, h);
    EXPECT_EQ(tier->stats().evictions, 36);
    EXPECT_EQ(tier->stats().checksum_failures, 0);
    tier.reset();
    tier = Open(o);  // clean close and reopen
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->usage().blocks, 4);
    for (BlockHash h : {37, 38, 39, 40}) ExpectBlock(*tier, h);
  }
}

TEST_F(DiskTierTest, EraseRemovesAndPublishes) {
  auto tier = Open(Options(4));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutBlock(*tier, 5).ok());
  ASSERT_TRUE(tier->Erase(5).ok());
  ASSERT_TRUE(tier->Erase(5).ok());  // absent: OK, no second event
  EXPECT_FALSE(tier->Contains(5));
  EXPECT_EQ(CountEvents(TierEvent::Kind::kRemoved), 1);
  std::vector<std::byte> dst(kBlock);
  EXPECT_EQ(tier->Get(5, dst).code(), absl::StatusCode::kNotFound);
}

TEST_F(DiskTierTest, ReopenKeepsBlocksInEveryMode) {
  for (DiskSyncMode mode : {DiskSyncMode::kNoWal, DiskSyncMode::kWal, DiskSyncMode::kWalSync}) {
    DiskTierOptions o = Options(16);
    o.path += std::to_string(static_cast<int>(mode));
    o.sync = mode;
    {
      auto tier = Open(o);
      ASSERT_NE(tier, nullptr);
      for (BlockHash h = 1; h <= 5; ++h) ASSERT_TRUE(PutBlock(*tier, h, h - 1).ok());
      ASSERT_TRUE(tier->Erase(3).ok());
    }
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->usage().blocks, 4);
    for (BlockHash h : {1, 2, 4, 5}) ExpectBlock(*tier, h);
    EXPECT_FALSE(tier->Contains(3));
    std::vector<BlockMeta> blocks = tier->Blocks();
    ASSERT_EQ(blocks.size(), 4u);
    for (const BlockMeta& m : blocks) EXPECT_EQ(m.parent, m.hash - 1);
  }
}

TEST_F(DiskTierTest, ReopenKeepsStoreOrderForEviction) {
  DiskTierOptions o = Options(4);
  {
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    for (BlockHash h : {40, 10, 30, 20}) ASSERT_TRUE(PutBlock(*tier, h).ok());
  }
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(PutBlock(*tier, 50).ok());
  ASSERT_TRUE(PutBlock(*tier, 60).ok());
  EXPECT_FALSE(tier->Contains(40));  // stored first, evicted first (not key order)
  EXPECT_FALSE(tier->Contains(10));
  for (BlockHash h : {30, 20, 50, 60}) EXPECT_TRUE(tier->Contains(h)) << h;
}

TEST_F(DiskTierTest, ReopenWithSmallerCapacityKeepsNewest) {
  {
    auto tier = Open(Options(8));
    ASSERT_NE(tier, nullptr);
    for (BlockHash h = 1; h <= 8; ++h) ASSERT_TRUE(PutBlock(*tier, h).ok());
  }
  {
    auto tier = Open(Options(3));
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->usage().blocks, 3);
    for (BlockHash h : {6, 7, 8}) ExpectBlock(*tier, h);
  }
  auto tier = Open(Options(8));  // the dropped blocks are gone from disk too
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->usage().blocks, 3);
}

TEST_F(DiskTierTest, CorruptValuesAreDataLossNeverServed) {
  auto tier = Open(Options(16));
  ASSERT_NE(tier, nullptr);
  const std::vector<std::byte> block = MakeBlock(7, kBlock);
  const uint64_t checksum = BlockChecksum(block);
  const std::string good(reinterpret_cast<const char*>(block.data()), block.size());
  std::string flipped = good;
  flipped[100] ^= 0x01;
  struct Case {
    std::string payload;
    uint64_t checksum;
  };
  const Case cases[] = {
      {flipped, checksum},                     // a flipped bit
      {good, checksum ^ 1},                    // the index's checksum is not the block's
      {good.substr(0, kBlock - 1), checksum},  // indexed with another length
      {"", checksum},                          // nothing written (the slot reads zeros)
  };
  int n = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(tier->PutRawForTest(7, c.payload, c.checksum).ok());
    ASSERT_TRUE(tier->Contains(7));
    std::vector<std::byte> dst(kBlock, std::byte{0});
    EXPECT_EQ(tier->Get(7, dst).code(), absl::StatusCode::kDataLoss) << n;
    EXPECT_FALSE(tier->Contains(7));
    EXPECT_EQ(tier->Get(7, dst).code(), absl::StatusCode::kNotFound);
    ++n;
    EXPECT_EQ(tier->stats().checksum_failures, n);
    ASSERT_FALSE(events_.empty());
    EXPECT_EQ(events_.back().kind, TierEvent::Kind::kRemoved);
  }
  EXPECT_EQ(tier->stats().misses, 2 * n);
  EXPECT_EQ(tier->stats().hits, 0);
  // The well-formed block is served, and another block's bytes in block 8's slot are not.
  ASSERT_TRUE(tier->PutRawForTest(7, good, checksum).ok());
  ExpectBlock(*tier, 7);
  ASSERT_TRUE(tier->PutRawForTest(8, good, BlockChecksum(MakeBlock(8, kBlock))).ok());
  std::vector<std::byte> dst(kBlock);
  EXPECT_EQ(tier->Get(8, dst).code(), absl::StatusCode::kDataLoss);
}

// A failing data write (the block) and a failing index write (its entry, after the block was
// written) are both rejected with nothing visible: no new block, no eviction, no event; the
// tier heals in place once the disk does.
class DiskTierFaultTest : public DiskTierTest,
                          public ::testing::WithParamInterface<bool /*fail index*/> {};

TEST_P(DiskTierFaultTest, FailedWritesAreRejectedAndInvisible) {
  FailingWritesEnv faulty(env_.get());
  std::atomic<bool>& fail = GetParam() ? faulty.fail_index_writes : faulty.fail_data_writes;
  DiskTierOptions o = Options(4);
  o.env = &faulty;
  o.sync = DiskSyncMode::kWal;  // every Put reaches the index log at once
  {
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    for (BlockHash h = 1; h <= 4; ++h) ASSERT_TRUE(PutBlock(*tier, h).ok());
    const size_t events_before = events_.size();
    fail = true;
    absl::Status s = PutBlock(*tier, 5);  // would also evict block 1
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(tier->stats().rejected, 1);
    EXPECT_EQ(tier->stats().puts, 4);
    EXPECT_EQ(tier->stats().evictions, 0);
    EXPECT_FALSE(tier->Contains(5));
    EXPECT_TRUE(tier->Contains(1));
    EXPECT_EQ(events_.size(), events_before);
    std::vector<std::byte> dst(kBlock);
    EXPECT_EQ(tier->Get(5, dst).code(), absl::StatusCode::kNotFound);
    ExpectBlock(*tier, 1);  // reads keep working
    fail = false;
    // The disk is healthy again: the tier recovers without a restart.
    absl::Status healed = PutBlock(*tier, 6);
    ASSERT_TRUE(healed.ok()) << healed;
    ExpectBlock(*tier, 6);
    for (BlockHash h : {1, 3, 4}) ExpectBlock(*tier, h);  // no slot was handed out twice
  }
  auto tier = Open(o);  // reopened on a healthy disk: the failed block never appears
  ASSERT_NE(tier, nullptr);
  EXPECT_FALSE(tier->Contains(5));
  EXPECT_FALSE(tier->Contains(2));  // the healed Put evicted 2 (1 had been read since)
  for (BlockHash h : {1, 3, 4, 6}) ExpectBlock(*tier, h);
  ASSERT_TRUE(PutBlock(*tier, 5).ok());
  ExpectBlock(*tier, 5);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
}

INSTANTIATE_TEST_SUITE_P(DataOrIndex, DiskTierFaultTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Index" : "Data"; });

TEST_F(DiskTierTest, ConcurrentPutsAndGets) {
  auto tier = Open(Options(64));
  ASSERT_NE(tier, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> dst(kBlock);
      for (int i = 0; i < 60; ++i) {
        const BlockHash h = 1 + (t * 60 + i) % 100;  // overlapping keys across threads
        if (!PutBlock(*tier, h).ok()) ++bad;
        absl::Status s = tier->Get(h, dst);
        if (s.ok() && dst != MakeBlock(h, kBlock)) ++bad;
        if (!s.ok() && s.code() != absl::StatusCode::kNotFound) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(tier->usage().blocks, 64);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
}

TEST(DiskTierOptionsTest, RejectsBadOptions) {
  DiskTierOptions o;
  o.path = "/x";
  o.block_bytes = kBlock;
  o.capacity_bytes = kBlock - 1;
  EXPECT_EQ(DiskTier::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.capacity_bytes = kBlock;
  o.policy = "no-such-policy";
  EXPECT_EQ(DiskTier::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.policy = "lru";
  o.path.clear();
  EXPECT_EQ(DiskTier::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseDiskSyncMode("wal-sync"), DiskSyncMode::kWalSync);
  EXPECT_EQ(*ParseDiskSyncMode("none"), DiskSyncMode::kNoWal);
  EXPECT_EQ(ParseDiskSyncMode("fsync").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DiskFormatTest, KeysSortNumerically) {
  BlockHash h = 0;
  const auto key = disk_internal::EncodeKey(0x0102030405060708ULL);
  EXPECT_EQ(std::string(key.data(), key.size()), std::string("\x01\x02\x03\x04\x05\x06\x07\x08"));
  ASSERT_TRUE(disk_internal::DecodeKey(std::string_view(key.data(), key.size()), &h));
  EXPECT_EQ(h, 0x0102030405060708ULL);
  EXPECT_LT(std::string_view(disk_internal::EncodeKey(255).data(), 8),
            std::string_view(disk_internal::EncodeKey(256).data(), 8));
}

}  // namespace
}  // namespace strata::kvstore
