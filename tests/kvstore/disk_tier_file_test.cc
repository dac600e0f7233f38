// G3 disk tier on real directories: the data file's bytes (flipped, torn, another block's),
// O_DIRECT with aligned and unaligned buffers, with and without huge-page staging, the buffered
// fallback where O_DIRECT is refused.
#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "disk_test_util.h"
#include "disk_tier_internal.h"
#include "gtest/gtest.h"
#include "strata/kvstore/disk_tier.h"

namespace strata::kvstore {
namespace {

namespace fs = std::filesystem;
using ::strata::kvstore::testing::FlipByte;
using ::strata::kvstore::testing::MakeBlock;

constexpr size_t kBlock = 16 << 10;
constexpr long kTmpfsMagic = 0x01021994;

class DiskTierFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("strata_disk_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  DiskTierOptions Options(int64_t capacity_blocks, size_t block = kBlock) const {
    DiskTierOptions o;
    o.path = dir_.string();
    o.block_bytes = block;
    o.capacity_bytes = capacity_blocks * static_cast<int64_t>(block);
    return o;
  }
  static std::unique_ptr<DiskTier> Open(const DiskTierOptions& o) {
    auto tier = DiskTier::Create(o);
    EXPECT_TRUE(tier.ok()) << tier.status();
    return tier.ok() ? *std::move(tier) : nullptr;
  }
  static void ExpectBlock(Tier& tier, BlockHash hash, size_t block = kBlock) {
    std::vector<std::byte> got(block);
    absl::Status s = tier.Get(hash, got);
    ASSERT_TRUE(s.ok()) << hash << ": " << s;
    EXPECT_TRUE(got == MakeBlock(hash, block)) << hash;
  }

  fs::path dir_;
};

// A byte flipped in a block's payload in the data file is caught by the checksum on read: the
// block is dropped, counted, never served; its neighbours are unaffected.
TEST_F(DiskTierFileTest, FlippedByteInDataFileIsNeverServed) {
  // Read through huge-page staging, and (without it) straight into an aligned buffer.
  for (bool staging : {true, false}) {
    fs::remove_all(dir_);
    DiskTierOptions o = Options(8);
    o.huge_page_staging = staging;
    uint64_t offset = 0;
    {
      auto tier = Open(o);
      ASSERT_NE(tier, nullptr);
      for (BlockHash h = 1; h <= 3; ++h) ASSERT_TRUE(tier->Put({h, 0}, MakeBlock(h, kBlock)).ok());
      offset = *tier->SlotOffsetForTest(2);
    }
    ASSERT_TRUE(FlipByte((dir_ / disk_internal::kDataFileName).string(), offset + 777, 0x40));
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    disk_internal::AlignedBuffer dst(kBlock);
    EXPECT_EQ(tier->Get(2, dst.span()).code(), absl::StatusCode::kDataLoss) << staging;
    EXPECT_FALSE(tier->Contains(2));
    EXPECT_EQ(tier->stats().checksum_failures, 1);
    EXPECT_EQ(tier->Get(2, dst.span()).code(), absl::StatusCode::kNotFound);
    for (BlockHash h : {1, 3}) ExpectBlock(*tier, h);
    // Its slot is reused and the store stays whole across a reopen.
    ASSERT_TRUE(tier->Put({4, 0}, MakeBlock(4, kBlock)).ok());
    tier.reset();
    tier = Open(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_FALSE(tier->Contains(2));
    for (BlockHash h : {1, 3, 4}) ExpectBlock(*tier, h);
  }
}

// What a crash can leave behind a durable index entry: a slot whose write was torn (the tail
// never reached the disk) or that another block's write reached instead. Both are DataLoss.
TEST_F(DiskTierFileTest, TornOrForeignSlotIsDataLoss) {
  const DiskTierOptions o = Options(8);
  uint64_t torn = 0, foreign = 0, donor = 0;
  {
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    for (BlockHash h = 1; h <= 3; ++h) ASSERT_TRUE(tier->Put({h, 0}, MakeBlock(h, kBlock)).ok());
    torn = *tier->SlotOffsetForTest(1);
    foreign = *tier->SlotOffsetForTest(2);
    donor = *tier->SlotOffsetForTest(3);
  }
  const std::string data = (dir_ / disk_internal::kDataFileName).string();
  {
    std::fstream f(data, std::ios::in | std::ios::out | std::ios::binary);
    // Block 1: the second half of its payload is stale zeros.
    const std::string zeros(kBlock / 2, '\0');
    f.seekp(static_cast<std::streamoff>(torn + kBlock / 2));
    f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    // Block 2's slot: a whole copy of block 3's slot.
    std::string slot(disk_internal::SlotBytes(kBlock), '\0');
    f.seekg(static_cast<std::streamoff>(donor));
    f.read(slot.data(), static_cast<std::streamsize>(slot.size()));
    f.seekp(static_cast<std::streamoff>(foreign));
    f.write(slot.data(), static_cast<std::streamsize>(slot.size()));
    ASSERT_TRUE(f.good());
  }
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  std::vector<std::byte> dst(kBlock);
  EXPECT_EQ(tier->Get(1, dst).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->Get(2, dst).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->stats().checksum_failures, 2);
  EXPECT_EQ(tier->stats().hits, 0);
  ExpectBlock(*tier, 3);
}

// On a file system that takes O_DIRECT (ext4, xfs), with huge-page staging on and off: a block
// size that is not a multiple of 4 KiB and buffers at any address go through a staging copy,
// aligned ones do not (but Gets with huge-page staging always do). All are byte-identical, and
// the file stays capacity + spare slots long however many Puts evict.
TEST_F(DiskTierFileTest, DirectIoWithAlignedAndUnalignedBuffers) {
  for (const auto& [block, staging] : {std::pair{kBlock, true}, std::pair{size_t{10000}, true},
                                       std::pair{kBlock, false}, std::pair{size_t{10000}, false}}) {
    fs::remove_all(dir_);
    DiskTierOptions o = Options(6, block);
    o.huge_page_staging = staging;
    auto tier = Open(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->huge_page_staging(),
              staging && tier->direct_io() && disk_internal::TransparentHugePagesAvailable());
    std::printf("block %zu: direct_io=%d huge_page_staging=%d\n", block, tier->direct_io() ? 1 : 0,
                tier->huge_page_staging() ? 1 : 0);
    disk_internal::AlignedBuffer aligned(block);
    for (BlockHash h = 1; h <= 30; ++h) {
      std::vector<std::byte> bytes = MakeBlock(h, block);
      if (h % 2 == 0) {
        std::memcpy(aligned.span().data(), bytes.data(), block);
        ASSERT_TRUE(tier->Put({h, h - 1}, aligned.span()).ok()) << h;
      } else {
        // An odd address: never 4 KiB aligned.
        std::vector<std::byte> odd(block + 1);
        std::memcpy(odd.data() + 1, bytes.data(), block);
        ASSERT_TRUE(tier->Put({h, h - 1}, std::span(odd).subspan(1)).ok()) << h;
      }
    }
    EXPECT_EQ(fs::file_size(dir_ / disk_internal::kDataFileName),
              7 * disk_internal::SlotBytes(block));
    for (BlockHash h = 25; h <= 30; ++h) {
      ASSERT_TRUE(tier->Get(h, aligned.span()).ok()) << h;
      EXPECT_TRUE(
          std::equal(aligned.span().begin(), aligned.span().end(), MakeBlock(h, block).begin()));
      ExpectBlock(*tier, h, block);  // a std::vector: unaligned
    }
    tier.reset();
    tier = Open(o);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->usage().blocks, 6);
    for (BlockHash h = 25; h <= 30; ++h) ExpectBlock(*tier, h, block);
  }
}

// More concurrent Gets than there are huge-page staging buffers: the ones that find none free
// read as without staging; every block served is exactly the one asked for, each thread's
// buffer aligned (odd threads) or not (even threads).
TEST_F(DiskTierFileTest, MoreConcurrentGetsThanStagingBuffers) {
  auto tier = Open(Options(32));
  ASSERT_NE(tier, nullptr);
  for (BlockHash h = 1; h <= 32; ++h) ASSERT_TRUE(tier->Put({h, 0}, MakeBlock(h, kBlock)).ok());
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      disk_internal::AlignedBuffer aligned(kBlock);
      std::vector<std::byte> unaligned(kBlock + 1);
      const std::span<std::byte> dst =
          t % 2 == 1 ? aligned.span() : std::span(unaligned).subspan(1);
      for (int i = 0; i < 40; ++i) {
        const BlockHash h = 1 + (t * 5 + i * 3) % 32;
        if (!tier->Get(h, dst).ok() || !std::ranges::equal(dst, MakeBlock(h, kBlock))) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(tier->stats().hits, 12 * 40);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
}

// Gets race with Puts that evict and reuse slots (a small tier, many keys, O_DIRECT on a real
// file): a read whose slot was rewritten under it is a plain miss, never a checksum failure,
// and whatever is served is exactly the block asked for.
TEST_F(DiskTierFileTest, ReadsRacingSlotReuseAreMissesNotCorruption) {
  auto tier = Open(Options(8));
  ASSERT_NE(tier, nullptr);
  std::atomic<int> bad{0}, served{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::byte> dst(kBlock);
      for (int i = 0; i < 150; ++i) {
        const BlockHash h = 1 + (t * 37 + i * 7) % 40;
        if (t % 2 == 0 && !tier->Put({h, 0}, MakeBlock(h, kBlock)).ok()) ++bad;
        const BlockHash r = 1 + (t * 11 + i * 13) % 40;
        absl::Status s = tier->Get(r, dst);
        if (s.ok()) {
          ++served;
          if (dst != MakeBlock(r, kBlock)) ++bad;
        } else if (s.code() != absl::StatusCode::kNotFound) {
          ++bad;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
  EXPECT_LE(tier->usage().blocks, 8);
  EXPECT_EQ(fs::file_size(dir_ / disk_internal::kDataFileName),
            9 * disk_internal::SlotBytes(kBlock));
}

// Where O_DIRECT is refused (tmpfs) or not wanted, the tier runs on buffered I/O.
TEST_F(DiskTierFileTest, FallsBackToBufferedIo) {
  DiskTierOptions o = Options(4);
  o.direct_io = false;
  auto tier = Open(o);
  ASSERT_NE(tier, nullptr);
  EXPECT_FALSE(tier->direct_io());
  ASSERT_TRUE(tier->Put({1, 0}, MakeBlock(1, kBlock)).ok());
  ExpectBlock(*tier, 1);
  tier.reset();

  struct statfs st {};
  if (::statfs("/dev/shm", &st) != 0 || st.f_type != kTmpfsMagic) {
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  }
  const fs::path shm =
      fs::path("/dev/shm") / ("strata_disk_fallback_" + std::to_string(::getpid()));
  fs::remove_all(shm);
  fs::create_directories(shm);
  // tmpfs refuses O_DIRECT before Linux 6.6 and takes it since: the tier must agree.
  const std::string probe = (shm / "probe").string();
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  const bool tmpfs_direct = fd >= 0;
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  o = Options(4);
  o.path = shm.string();
  {
    auto on_tmpfs = Open(o);  // direct_io requested
    ASSERT_NE(on_tmpfs, nullptr);
    EXPECT_EQ(on_tmpfs->direct_io(), tmpfs_direct);
    std::printf("tmpfs takes O_DIRECT: %d\n", tmpfs_direct ? 1 : 0);
    for (BlockHash h = 1; h <= 6; ++h)
      ASSERT_TRUE(on_tmpfs->Put({h, 0}, MakeBlock(h, kBlock)).ok());
    for (BlockHash h = 3; h <= 6; ++h) ExpectBlock(*on_tmpfs, h);
  }
  auto reopened = Open(o);
  ASSERT_NE(reopened, nullptr);
  for (BlockHash h = 3; h <= 6; ++h) ExpectBlock(*reopened, h);
  reopened.reset();
  fs::remove_all(shm);
}

}  // namespace
}  // namespace strata::kvstore
