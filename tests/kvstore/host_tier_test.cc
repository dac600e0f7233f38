// G2 host tier: round trips, eviction through the policy and the hook, checksum faults, leases
// and their timeouts, direct writes, caller-supplied memory, and a multi-threaded smoke test.
#include "strata/kvstore/host_tier.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "host_tier_internal.h"

namespace strata::kvstore {
namespace {

constexpr size_t kBlock = 4096;
// BlockChecksum of ChecksumIsAFixedFunction's inputs (cross-checked against an independent
// Python transcription of the definition in tier.cc).
constexpr uint64_t kGoldenChecksum1500 = 6844763263013897041ULL;
constexpr uint64_t kGoldenChecksumEmpty = 15995393589288388306ULL;

std::vector<std::byte> BlockData(BlockHash hash, size_t size = kBlock) {
  std::vector<std::byte> data(size);
  uint64_t x = hash * 0x9E3779B97F4A7C15ULL + 1;
  for (auto& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  return data;
}

std::unique_ptr<HostTier> MakeTier(int64_t blocks, std::string policy = "lru",
                                   absl::Duration lease_timeout = absl::Seconds(30)) {
  HostTierOptions options;
  options.block_bytes = kBlock;
  options.capacity_bytes = blocks * static_cast<int64_t>(kBlock) + 100;  // rounded down
  options.policy = std::move(policy);
  options.lease_timeout = lease_timeout;
  auto tier = HostTier::Create(options);
  EXPECT_TRUE(tier.ok()) << tier.status();
  return std::move(tier).value();
}

absl::Status PutBlock(Tier& tier, BlockHash hash, BlockHash parent = kRootBlockHash) {
  auto data = BlockData(hash);
  return tier.Put(BlockMeta{.hash = hash, .parent = parent}, data);
}

// Get into a fresh buffer; checks the bytes on success.
absl::Status GetBlock(Tier& tier, BlockHash hash) {
  std::vector<std::byte> out(kBlock);
  absl::Status s = tier.Get(hash, out);
  if (s.ok()) {
    EXPECT_EQ(out, BlockData(hash)) << "block " << hash;
  }
  return s;
}

// Records events (the listener must be cheap; a vector under a mutex is).
struct EventLog {
  absl::Mutex mu;
  std::vector<TierEvent> events;
  TierEventListener Listener() {
    return [this](const TierEvent& e) {
      absl::MutexLock lock(&mu);
      events.push_back(e);
    };
  }
};

// The pool's own memory (no `allocate`): any size, mapped at a 2 MiB boundary (so huge pages
// can back it), every byte faulted in, zero and writable; a pool large enough to be populated
// by several threads too.
TEST(HostPoolTest, OwnMemoryOfAnySizeIsAlignedZeroedAndWritable) {
  for (const size_t bytes : {size_t{7000}, size_t{3} << 20, (size_t{520} << 20) + 12345}) {
    auto pool = internal::HostPool::Create(bytes, nullptr);
    ASSERT_TRUE(pool.ok()) << pool.status();
    ASSERT_NE(pool->base(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(pool->base()) % (size_t{2} << 20), 0u) << bytes;
    EXPECT_EQ(pool->bytes(), bytes);
    std::byte* p = pool->base();
    for (size_t i = 0; i < bytes; i += 4096) ASSERT_EQ(p[i], std::byte{0}) << i;
    ASSERT_EQ(p[bytes - 1], std::byte{0});
    std::memset(p, 0x5a, bytes);
    EXPECT_EQ(p[bytes / 2], std::byte{0x5a});
    EXPECT_EQ(p[bytes - 1], std::byte{0x5a});
  }
}

TEST(HostTierTest, CreateValidatesOptions) {
  HostTierOptions options;
  options.block_bytes = 0;
  options.capacity_bytes = 1 << 20;
  EXPECT_EQ(HostTier::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.block_bytes = kBlock;
  options.capacity_bytes = kBlock - 1;
  EXPECT_EQ(HostTier::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.capacity_bytes = kBlock;
  options.policy = "nope";
  EXPECT_EQ(HostTier::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  // More slots than an int32 indexes: refused, naming the numbers, before anything is mapped.
  options.policy = "lru";
  options.block_bytes = 4096;
  options.capacity_bytes = (int64_t{1} << 31) * 4096;
  const absl::Status many = HostTier::Create(options).status();
  EXPECT_EQ(many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(many.message(),
            "host tier: capacity 8796093022208 bytes makes 2147483648 slots of 4096 bytes, more "
            "than 2^31");
}

TEST(HostTierTest, CopyChecksumEqualsBlockChecksumOnEveryPath) {
  // Sizes around the 64-byte stripe and the 1 KiB scramble period, and a big block.
  for (size_t size : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1023},
                      size_t{1024}, size_t{1088}, size_t{4096}, size_t{65537}, size_t{300000}}) {
    auto src = BlockData(7, size);
    std::vector<std::byte> dst(size);
    const uint64_t sum = BlockChecksum(src);
    EXPECT_EQ(CopyWithBlockChecksum(dst, src), sum) << size;
    EXPECT_EQ(internal::PortableBlockChecksumForTest(src), sum) << size;
    EXPECT_EQ(dst, src);
    // Streaming stores need a 32-byte aligned destination (else the cached path is taken).
    std::vector<std::byte> raw(size + 64);
    auto* aligned = reinterpret_cast<std::byte*>(
        (reinterpret_cast<uintptr_t>(raw.data()) + 63) & ~uintptr_t{63});
    std::span<std::byte> streamed(aligned, size);
    EXPECT_EQ(CopyWithBlockChecksum(streamed, src, CopyDestination::kStreamed), sum) << size;
    EXPECT_TRUE(std::equal(streamed.begin(), streamed.end(), src.begin())) << size;
  }
}

TEST(HostTierTest, ChecksumIsAFixedFunction) {
  // Values are stored on disk and sent between processes: the function must never drift.
  std::vector<std::byte> data(1500);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + 3);
  EXPECT_EQ(BlockChecksum(data), kGoldenChecksum1500);
  EXPECT_EQ(BlockChecksum({}), kGoldenChecksumEmpty);
}

TEST(HostTierTest, ChecksumDetectsFlippedBitsAndMovedStripes) {
  const auto base = BlockData(11, 8192);
  const uint64_t sum = BlockChecksum(base);
  // Every single-bit flip at a spread of positions (both halves of a lane, tail included).
  for (size_t pos : {size_t{0}, size_t{3}, size_t{4}, size_t{63}, size_t{64}, size_t{1023},
                     size_t{1024}, size_t{5000}, size_t{8191}}) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = base;
      bad[pos] ^= static_cast<std::byte>(1 << bit);
      EXPECT_NE(BlockChecksum(bad), sum) << pos << ":" << bit;
    }
  }
  // Two 64-byte stripes swapped: same bytes, other places.
  auto swapped = base;
  std::swap_ranges(swapped.begin() + 128, swapped.begin() + 192, swapped.begin() + 4096);
  EXPECT_NE(BlockChecksum(swapped), sum);
  // All zeros of different lengths differ.
  std::vector<std::byte> z1(4096), z2(4160);
  EXPECT_NE(BlockChecksum(z1), BlockChecksum(z2));
}

TEST(HostTierTest, PutGetRoundTripWithStatsUsageAndEvents) {
  auto tier = MakeTier(4);
  EventLog log;
  tier->SetEventListener(log.Listener());
  EXPECT_EQ(tier->kind(), TierKind::kHost);
  EXPECT_EQ(tier->pool_bytes(), 4 * kBlock);
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  ASSERT_TRUE(PutBlock(*tier, 2, /*parent=*/1).ok());
  ASSERT_TRUE(PutBlock(*tier, 2, 1).ok());  // present: OK, not counted
  EXPECT_TRUE(GetBlock(*tier, 2).ok());
  EXPECT_EQ(GetBlock(*tier, 3).code(), absl::StatusCode::kNotFound);
  std::vector<std::byte> small(10);
  EXPECT_EQ(tier->Put({.hash = 9}, small).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(tier->Contains(1));
  std::vector<BlockHash> chain = {1, 2, 3, 1};
  EXPECT_EQ(tier->CountPrefix(chain), 2);
  EXPECT_EQ(tier->Contents().size(), 2u);

  TierStats st = tier->stats();
  EXPECT_EQ(st.puts, 2);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.bytes_in, 2 * static_cast<int64_t>(kBlock));
  EXPECT_EQ(st.bytes_out, static_cast<int64_t>(kBlock));
  TierUsage u = tier->usage();
  EXPECT_EQ(u.blocks, 2);
  EXPECT_EQ(u.bytes, 2 * static_cast<int64_t>(kBlock));
  EXPECT_EQ(u.capacity_bytes, 4 * static_cast<int64_t>(kBlock));

  ASSERT_TRUE(tier->Erase(1).ok());
  ASSERT_TRUE(tier->Erase(1).ok());  // absent: OK, no event
  EXPECT_FALSE(tier->Contains(1));
  absl::MutexLock lock(&log.mu);
  ASSERT_EQ(log.events.size(), 3u);
  EXPECT_EQ(log.events[0].kind, TierEvent::Kind::kStored);
  EXPECT_EQ(log.events[1].hash, 2u);
  EXPECT_EQ(log.events[1].parent, 1u);
  EXPECT_EQ(log.events[2].kind, TierEvent::Kind::kRemoved);
  EXPECT_EQ(log.events[2].hash, 1u);
  EXPECT_EQ(log.events[2].tier, TierKind::kHost);
}

TEST(HostTierTest, EvictsByPolicyThroughTheHook) {
  auto tier = MakeTier(3);
  std::vector<std::pair<BlockHash, bool>> hooked;  // hash, bytes intact
  tier->SetEvictionHook(
      [&](const BlockMeta& meta, std::span<const std::byte> bytes, uint64_t checksum) {
        EXPECT_EQ(checksum, BlockChecksum(BlockData(meta.hash)));
        hooked.emplace_back(
            meta.hash, std::vector<std::byte>(bytes.begin(), bytes.end()) == BlockData(meta.hash));
        return true;
      });
  for (BlockHash h : {1, 2, 3}) ASSERT_TRUE(PutBlock(*tier, h).ok());
  ASSERT_TRUE(GetBlock(*tier, 1).ok());  // 2 is now least recently used
  ASSERT_TRUE(PutBlock(*tier, 4).ok());
  EXPECT_FALSE(tier->Contains(2));
  ASSERT_TRUE(tier->Erase(3).ok());  // an erase is not an eviction: no hook
  ASSERT_TRUE(PutBlock(*tier, 5).ok());
  EXPECT_THAT(hooked, ::testing::ElementsAre(std::pair<BlockHash, bool>(2, true)));
  EXPECT_EQ(tier->stats().evictions, 1);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
  for (BlockHash h : {1, 4, 5}) EXPECT_TRUE(GetBlock(*tier, h).ok()) << h;
}

// A hook that finds the evicted bytes no longer match their checksum says so; the tier counts
// a checksum failure and still frees the slot.
TEST(HostTierTest, AHookThatFindsCorruptBytesCountsAChecksumFailure) {
  auto tier = MakeTier(1);
  tier->SetEvictionHook(
      [](const BlockMeta&, std::span<const std::byte>, uint64_t) { return false; });
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  EXPECT_FALSE(tier->Contains(1));
  EXPECT_EQ(tier->stats().evictions, 1);
  EXPECT_EQ(tier->stats().checksum_failures, 1);
  EXPECT_TRUE(GetBlock(*tier, 2).ok());
}

// The fault test: a byte flipped in pool memory is detected, never served, erased and counted.
TEST(HostTierTest, CorruptSlotIsDataLossAndErased) {
  auto tier = MakeTier(2);
  EventLog log;
  tier->SetEventListener(log.Listener());
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  auto lease = tier->Acquire(1);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->checksum, BlockChecksum(BlockData(1)));
  tier->Release(lease->id);
  static_cast<std::byte*>(tier->pool_base())[lease->offset + 1234] ^= std::byte{0x01};

  std::vector<std::byte> out(kBlock);
  EXPECT_EQ(tier->Get(1, out).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(tier->Contains(1));
  EXPECT_EQ(tier->Get(1, out).code(), absl::StatusCode::kNotFound);
  TierStats st = tier->stats();
  EXPECT_EQ(st.checksum_failures, 1);
  EXPECT_EQ(st.misses, 2);
  EXPECT_EQ(tier->usage().blocks, 1);
  EXPECT_TRUE(GetBlock(*tier, 2).ok());
  ASSERT_TRUE(PutBlock(*tier, 3).ok());  // the freed slot is reused, nothing evicted
  EXPECT_EQ(tier->stats().evictions, 0);
  absl::MutexLock lock(&log.mu);
  EXPECT_EQ(log.events.back().kind, TierEvent::Kind::kStored);
  EXPECT_EQ(log.events[log.events.size() - 2].kind, TierEvent::Kind::kRemoved);
  EXPECT_EQ(log.events[log.events.size() - 2].hash, 1u);
}

TEST(HostTierTest, LeaseBlocksEvictionUntilReleased) {
  auto tier = MakeTier(2);
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  auto lease1 = tier->Acquire(1);
  ASSERT_TRUE(lease1.ok());
  ASSERT_TRUE(GetBlock(*tier, 2).ok());  // LRU would now evict 1, but it is leased
  ASSERT_TRUE(PutBlock(*tier, 3).ok());
  EXPECT_TRUE(tier->Contains(1));
  EXPECT_FALSE(tier->Contains(2));
  auto lease3 = tier->Acquire(3);
  ASSERT_TRUE(lease3.ok());
  EXPECT_EQ(PutBlock(*tier, 4).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->stats().rejected, 1);
  EXPECT_EQ(tier->Acquire(99).status().code(), absl::StatusCode::kNotFound);
  tier->Release(lease1->id);
  tier->Release(lease1->id);  // twice: ignored
  ASSERT_TRUE(PutBlock(*tier, 4).ok());
  EXPECT_FALSE(tier->Contains(1));
  EXPECT_TRUE(tier->Contains(3));
  tier->Release(lease3->id);
  EXPECT_EQ(tier->expired_leases(), 0);
}

TEST(HostTierTest, ExpiredLeaseIsReclaimedWhenRoomIsNeeded) {
  auto tier = MakeTier(1, "lru", absl::Milliseconds(50));
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  auto lease = tier->Acquire(1);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(PutBlock(*tier, 2).code(), absl::StatusCode::kResourceExhausted);
  absl::SleepFor(absl::Milliseconds(60));
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  EXPECT_EQ(tier->expired_leases(), 1);
  tier->Release(lease->id);  // already expired: ignored
  EXPECT_TRUE(GetBlock(*tier, 2).ok());
}

TEST(HostTierTest, ErasedWhileLeasedFreesSlotOnRelease) {
  auto tier = MakeTier(1);
  ASSERT_TRUE(PutBlock(*tier, 1).ok());
  auto lease = tier->Acquire(1);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(tier->Erase(1).ok());
  EXPECT_FALSE(tier->Contains(1));
  // The peer may still be reading the slot: it is not reused until the lease goes.
  EXPECT_EQ(PutBlock(*tier, 2).code(), absl::StatusCode::kResourceExhausted);
  tier->Release(lease->id);
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  EXPECT_TRUE(GetBlock(*tier, 2).ok());
}

TEST(HostTierTest, DirectWriteReserveCommitAbort) {
  auto tier = MakeTier(2);
  EventLog log;
  tier->SetEventListener(log.Listener());
  auto* base = static_cast<std::byte*>(tier->pool_base());
  auto res = tier->ReserveWrite({.hash = 5, .parent = 4});
  ASSERT_TRUE(res.ok());
  EXPECT_FALSE(tier->Contains(5));  // not visible until committed
  auto data = BlockData(5);
  std::memcpy(base + res->offset, data.data(), kBlock);
  ASSERT_TRUE(tier->CommitWrite(res->id, BlockChecksum(data)).ok());
  EXPECT_TRUE(GetBlock(*tier, 5).ok());
  EXPECT_EQ(tier->CommitWrite(res->id, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->ReserveWrite({.hash = 5}).status().code(), absl::StatusCode::kAlreadyExists);

  // A write whose bytes do not match the sender's checksum is dropped.
  auto bad = tier->ReserveWrite({.hash = 6});
  ASSERT_TRUE(bad.ok());
  std::memcpy(base + bad->offset, data.data(), kBlock);
  EXPECT_EQ(tier->CommitWrite(bad->id, BlockChecksum(BlockData(6))).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(tier->Contains(6));
  EXPECT_EQ(tier->stats().checksum_failures, 1);

  auto aborted = tier->ReserveWrite({.hash = 7});
  ASSERT_TRUE(aborted.ok());
  tier->AbortWrite(aborted->id);
  EXPECT_EQ(tier->usage().blocks, 1);
  ASSERT_TRUE(PutBlock(*tier, 8).ok());  // a free slot: nothing evicted
  EXPECT_EQ(tier->stats().evictions, 0);
  absl::MutexLock lock(&log.mu);
  ASSERT_EQ(log.events.size(), 2u);
  EXPECT_EQ(log.events[0].hash, 5u);
  EXPECT_EQ(log.events[0].parent, 4u);
}

// A local writer's commit: the checksum comes from the slot, and readers verify against it.
TEST(HostTierTest, LocalWriteCommitComputesTheChecksum) {
  auto tier = MakeTier(2);
  auto* base = static_cast<std::byte*>(tier->pool_base());
  auto res = tier->ReserveWrite({.hash = 5});
  ASSERT_TRUE(res.ok());
  const auto data = BlockData(5);
  std::memcpy(base + res->offset, data.data(), kBlock);
  ASSERT_TRUE(tier->CommitLocalWrite(res->id).ok());
  EXPECT_TRUE(GetBlock(*tier, 5).ok());  // the bytes, verified
  EXPECT_EQ(tier->CommitLocalWrite(res->id).code(), absl::StatusCode::kNotFound);
  // A bit flipped in the slot after the commit is caught on read.
  base[res->offset + 17] ^= std::byte{1};
  EXPECT_EQ(GetBlock(*tier, 5).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->stats().checksum_failures, 1);
}

TEST(HostTierTest, ExpiredReservationIsReclaimed) {
  auto tier = MakeTier(1, "lru", absl::Milliseconds(50));
  auto res = tier->ReserveWrite({.hash = 1});
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(PutBlock(*tier, 2).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(tier->ReserveWrite({.hash = 3}).status().code(), absl::StatusCode::kResourceExhausted);
  absl::SleepFor(absl::Milliseconds(60));
  ASSERT_TRUE(PutBlock(*tier, 2).ok());
  EXPECT_EQ(tier->expired_leases(), 1);
  EXPECT_EQ(tier->CommitWrite(res->id, 0).code(), absl::StatusCode::kNotFound);
}

TEST(HostTierTest, UsesCallerMemoryAndReportsKind) {
  std::vector<std::byte> memory(3 * kBlock);
  HostTierOptions options;
  options.block_bytes = kBlock;
  options.capacity_bytes = 3 * kBlock;
  options.kind = TierKind::kRemote;
  options.policy = "s3-fifo";
  size_t asked = 0;
  options.allocate = [&](size_t bytes) -> absl::StatusOr<void*> {
    asked = bytes;
    return memory.data();
  };
  auto tier = HostTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(asked, 3 * kBlock);
  EXPECT_EQ((*tier)->pool_base(), memory.data());
  EXPECT_TRUE((*tier)->pinned());
  EXPECT_EQ((*tier)->kind(), TierKind::kRemote);
  EventLog log;
  (*tier)->SetEventListener(log.Listener());
  ASSERT_TRUE(PutBlock(**tier, 11).ok());
  auto lease = (*tier)->Acquire(11);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(std::vector<std::byte>(memory.begin() + lease->offset,
                                   memory.begin() + lease->offset + kBlock),
            BlockData(11));
  absl::MutexLock lock(&log.mu);
  EXPECT_EQ(log.events.at(0).tier, TierKind::kRemote);

  options.allocate = [](size_t) -> absl::StatusOr<void*> {
    return absl::ResourceExhaustedError("no registered memory");
  };
  EXPECT_EQ(HostTier::Create(options).status().code(), absl::StatusCode::kResourceExhausted);
}

// Threads put, get, lease and erase overlapping keys in a tier smaller than the key space:
// every successful read returns the right bytes and the tier's bookkeeping stays consistent.
TEST(HostTierTest, ConcurrentSmoke) {
  for (const char* policy : {"lru", "s3-fifo", "arc"}) {
    auto tier = MakeTier(16, policy);
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::byte> out(kBlock);
        for (int i = 0; i < 400; ++i) {
          const BlockHash h = 1 + static_cast<BlockHash>((i * 7 + t * 13) % 40);
          absl::Status s;
          switch (i % 4) {
            case 0:
              s = PutBlock(*tier, h);
              if (!s.ok()) ++bad;
              break;
            case 1:
              s = tier->Get(h, out);
              if (s.ok() ? out != BlockData(h) : s.code() != absl::StatusCode::kNotFound) ++bad;
              break;
            case 2:
              if (auto lease = tier->Acquire(h); lease.ok()) tier->Release(lease->id);
              break;
            case 3:
              if (i % 20 == 3) s = tier->Erase(h);
              break;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(bad.load(), 0) << policy;
    TierUsage u = tier->usage();
    EXPECT_LE(u.blocks, 16);
    EXPECT_EQ(static_cast<int64_t>(tier->Contents().size()), u.blocks);
    for (const BlockMeta& m : tier->Contents()) EXPECT_TRUE(GetBlock(*tier, m.hash).ok());
    EXPECT_EQ(tier->stats().checksum_failures, 0);
  }
}

// Writes `text` to `path`, creating its folders.
void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

class MemoryRoomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("memory_room_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    WriteFile(root_ / "proc/meminfo",
              "MemTotal:       24000000 kB\nMemFree:         1000000 kB\n"
              "MemAvailable:    8388608 kB\nBuffers:          1000 kB\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  kvstore::MemoryRoom Read() {
    return kvstore::ReadMemoryRoom((root_ / "proc").string(), (root_ / "cg").string());
  }
  std::filesystem::path root_;
};

TEST_F(MemoryRoomTest, MachineOnlyWithoutACgroupLimit) {
  WriteFile(root_ / "proc/self/cgroup", "0::/user.slice/session-1.scope\n");
  WriteFile(root_ / "cg/user.slice/session-1.scope/memory.max", "max\n");
  WriteFile(root_ / "cg/user.slice/session-1.scope/memory.current", "123456\n");
  const kvstore::MemoryRoom room = Read();
  EXPECT_EQ(room.available, int64_t{8} << 30);
  EXPECT_EQ(room.cgroup_room, -1);
  EXPECT_TRUE(kvstore::CheckMemoryFits(size_t{8} << 30, "pool", room).ok());
  const absl::Status s = kvstore::CheckMemoryFits((size_t{8} << 30) + 1, "pool", room);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "pool of 8.0 GiB does not fit in memory: this machine has 8.0 GiB available");
}

TEST_F(MemoryRoomTest, TheTightestAncestorOfACgroupV2Counts) {
  WriteFile(root_ / "proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  WriteFile(root_ / "cg/kubepods/pod1/ctr/memory.max", "max\n");
  WriteFile(root_ / "cg/kubepods/pod1/ctr/memory.current", "1000\n");
  // The pod: 3 GiB limit, 1 GiB used -> 2 GiB left, tighter than the container and the machine.
  WriteFile(root_ / "cg/kubepods/pod1/memory.max", std::to_string(int64_t{3} << 30) + "\n");
  WriteFile(root_ / "cg/kubepods/pod1/memory.current", std::to_string(int64_t{1} << 30) + "\n");
  WriteFile(root_ / "cg/kubepods/memory.max", std::to_string(int64_t{16} << 30) + "\n");
  WriteFile(root_ / "cg/kubepods/memory.current", "0\n");
  const kvstore::MemoryRoom room = Read();
  EXPECT_EQ(room.cgroup_room, int64_t{2} << 30);
  EXPECT_EQ(room.cgroup, (root_ / "cg/kubepods/pod1").string());
  EXPECT_TRUE(kvstore::CheckMemoryFits(size_t{2} << 30, "pool", room).ok());
  const absl::Status s = kvstore::CheckMemoryFits(size_t{3} << 30, "kvstore k pool", room);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      std::string(s.message()),
      ::testing::HasSubstr("kvstore k pool of 3.0 GiB does not fit in memory: the cgroup "));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("pod1 has 2.0 GiB left"));
}

TEST_F(MemoryRoomTest, CgroupV1MemoryControllerCounts) {
  WriteFile(root_ / "proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n9:memory:/docker/abc\n");
  WriteFile(root_ / "cg/memory/docker/abc/memory.limit_in_bytes",
            std::to_string(int64_t{4} << 30) + "\n");
  WriteFile(root_ / "cg/memory/docker/abc/memory.usage_in_bytes",
            std::to_string(int64_t{3} << 30) + "\n");
  WriteFile(root_ / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n");  // no limit
  WriteFile(root_ / "cg/memory/memory.usage_in_bytes", "5\n");
  const kvstore::MemoryRoom room = Read();
  EXPECT_EQ(room.cgroup_room, int64_t{1} << 30);
  EXPECT_FALSE(kvstore::CheckMemoryFits((size_t{1} << 30) + 4096, "pool", room).ok());
}

// Page cache of files counts as room (the kernel reclaims it first); shared memory does not.
TEST_F(MemoryRoomTest, FileCacheIsRoomButSharedMemoryIsNot) {
  WriteFile(root_ / "proc/self/cgroup", "0::/pod\n");
  WriteFile(root_ / "cg/pod/memory.max", std::to_string(int64_t{8} << 30) + "\n");
  WriteFile(root_ / "cg/pod/memory.current", std::to_string(int64_t{7} << 30) + "\n");
  // 7 GiB used: 3 GiB of it file cache (1 active, 2 inactive), 2 GiB shmem.
  WriteFile(root_ / "cg/pod/memory.stat",
            "anon 2147483648\nfile 5368709120\nshmem 2147483648\nactive_file 1073741824\n"
            "inactive_file 2147483648\nactive_anon 3221225472\n");
  kvstore::MemoryRoom room = Read();
  EXPECT_EQ(room.cgroup_room, int64_t{4} << 30);  // 8 - (7 - 3)
  // v1 names its hierarchical totals total_*.
  WriteFile(root_ / "proc/self/cgroup", "4:memory:/pod\n");
  WriteFile(root_ / "cg/memory/pod/memory.limit_in_bytes", std::to_string(int64_t{8} << 30));
  WriteFile(root_ / "cg/memory/pod/memory.usage_in_bytes", std::to_string(int64_t{7} << 30));
  WriteFile(root_ / "cg/memory/pod/memory.stat",
            "cache 3221225472\nactive_file 1\ntotal_active_file 1073741824\n"
            "total_inactive_file 1073741824\n");
  room = Read();
  EXPECT_EQ(room.cgroup_room, int64_t{3} << 30);  // 8 - (7 - 2)
}

TEST_F(MemoryRoomTest, NothingKnownRefusesNothing) {
  std::filesystem::remove(root_ / "proc/meminfo");
  const kvstore::MemoryRoom room = Read();
  EXPECT_EQ(room.available, -1);
  EXPECT_EQ(room.cgroup_room, -1);
  EXPECT_TRUE(kvstore::CheckMemoryFits(size_t{1} << 50, "pool", room).ok());
}

// The real reading of this machine: some memory is available, and a petabyte is refused by
// HostTier::Create before anything is mapped. (An address-space limit for the duration makes
// sure that a broken check fails the mmap instead of faulting the machine's memory away.)
TEST(HostTierTest, APoolLargerThanTheMachineIsRefused) {
  EXPECT_GT(kvstore::ReadMemoryRoom().available, 0);
  rlimit before{};
  ASSERT_EQ(::getrlimit(RLIMIT_AS, &before), 0);
  rlimit guard = before;
  guard.rlim_cur = std::min<rlim_t>(before.rlim_cur, rlim_t{1} << 40);
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &guard), 0);
  HostTierOptions o;
  o.block_bytes = size_t{1} << 30;
  o.capacity_bytes = int64_t{1} << 50;
  auto tier = HostTier::Create(o);
  ASSERT_EQ(::setrlimit(RLIMIT_AS, &before), 0);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(tier.status().message()),
              ::testing::HasSubstr("host tier pool of 1048576.0 GiB does not fit in memory"));
}

}  // namespace
}  // namespace strata::kvstore
