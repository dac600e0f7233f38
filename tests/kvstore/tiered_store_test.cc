// TieredStore over a real G2 HostTier and fake in-memory G3/G4 tiers (so these tests depend on
// no disk or network): offload, the frequency filter, demotion, Locate, Prefetch, events,
// metrics (checked by promtool when installed), Flush and shutdown.
#include "strata/kvstore/tiered_store.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/kvstore/host_tier.h"

namespace strata::kvstore {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr size_t kBlock = 1024;

std::vector<std::byte> BlockData(BlockHash hash) {
  std::vector<std::byte> data(kBlock);
  for (size_t i = 0; i < kBlock; ++i) data[i] = static_cast<std::byte>((hash * 131 + i * 7) & 0xff);
  return data;
}

// A fake tier's state, shared with the test so it can be inspected after the store is gone.
struct FakeState {
  absl::Mutex mu;
  std::map<BlockHash, std::vector<std::byte>> blocks;
  std::set<BlockHash> corrupt;  // Get of these is DataLoss
  TierStats stats;
  TierEventListener listener;
  absl::Notification* put_gate = nullptr;  // Put waits for it when set
  std::atomic<int> puts_entered{0};
  mutable std::atomic<int> contains_calls{0};
};

class FakeTier final : public Tier {
 public:
  FakeTier(TierKind kind, std::shared_ptr<FakeState> state, size_t block = kBlock)
      : kind_(kind), block_(block), s_(std::move(state)) {}
  TierKind kind() const override { return kind_; }
  size_t block_bytes() const override { return block_; }
  absl::Status Put(const BlockMeta& meta, std::span<const std::byte> data) override {
    ++s_->puts_entered;
    if (s_->put_gate != nullptr) s_->put_gate->WaitForNotification();
    absl::MutexLock lock(&s_->mu);
    if (s_->blocks.contains(meta.hash)) return absl::OkStatus();
    s_->blocks[meta.hash].assign(data.begin(), data.end());
    ++s_->stats.puts;
    s_->stats.bytes_in += static_cast<int64_t>(data.size());
    Emit({.kind = TierEvent::Kind::kStored,
          .tier = kind_,
          .hash = meta.hash,
          .parent = meta.parent});
    return absl::OkStatus();
  }
  absl::Status Get(BlockHash hash, std::span<std::byte> dst) override {
    absl::MutexLock lock(&s_->mu);
    auto it = s_->blocks.find(hash);
    if (it == s_->blocks.end()) {
      ++s_->stats.misses;
      return absl::NotFoundError("fake: absent");
    }
    if (s_->corrupt.contains(hash)) {
      ++s_->stats.misses;
      ++s_->stats.checksum_failures;
      s_->blocks.erase(it);
      Emit({.kind = TierEvent::Kind::kRemoved, .tier = kind_, .hash = hash});
      return absl::DataLossError("fake: corrupt");
    }
    std::copy(it->second.begin(), it->second.end(), dst.begin());
    ++s_->stats.hits;
    s_->stats.bytes_out += static_cast<int64_t>(dst.size());
    return absl::OkStatus();
  }
  bool Contains(BlockHash hash) const override {
    ++s_->contains_calls;
    absl::MutexLock lock(&s_->mu);
    return s_->blocks.contains(hash);
  }
  absl::Status Erase(BlockHash hash) override {
    absl::MutexLock lock(&s_->mu);
    if (s_->blocks.erase(hash) > 0)
      Emit({.kind = TierEvent::Kind::kRemoved, .tier = kind_, .hash = hash});
    return absl::OkStatus();
  }
  TierUsage usage() const override {
    absl::MutexLock lock(&s_->mu);
    const auto n = static_cast<int64_t>(s_->blocks.size());
    return {.blocks = n, .bytes = n * static_cast<int64_t>(block_), .capacity_bytes = 1 << 30};
  }
  TierStats stats() const override {
    absl::MutexLock lock(&s_->mu);
    return s_->stats;
  }
  void SetEventListener(TierEventListener listener) override {
    absl::MutexLock lock(&s_->mu);
    s_->listener = std::move(listener);
  }

 private:
  void Emit(const TierEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s_->mu) {
    if (s_->listener) s_->listener(e);
  }
  TierKind kind_;
  size_t block_;
  std::shared_ptr<FakeState> s_;
};

std::unique_ptr<HostTier> MakeHost(int64_t blocks) {
  HostTierOptions options;
  options.block_bytes = kBlock;
  options.capacity_bytes = blocks * static_cast<int64_t>(kBlock);
  return std::move(HostTier::Create(options)).value();
}

struct Fixture {
  std::shared_ptr<FakeState> disk = std::make_shared<FakeState>();
  std::shared_ptr<FakeState> remote = std::make_shared<FakeState>();
  std::unique_ptr<TieredStore> store;

  Fixture(TieredStoreOptions options, int64_t host_blocks, bool with_disk, bool with_remote) {
    auto created = TieredStore::Create(
        options, MakeHost(host_blocks),
        with_disk ? std::make_unique<FakeTier>(TierKind::kDisk, disk) : nullptr,
        with_remote ? std::make_unique<FakeTier>(TierKind::kRemote, remote) : nullptr);
    EXPECT_TRUE(created.ok()) << created.status();
    store = std::move(created).value();
  }
  absl::Status Offload(BlockHash h, BlockHash parent = kRootBlockHash) {
    return store->Offload({.hash = h, .parent = parent}, BlockData(h));
  }
  static bool Holds(FakeState& s, BlockHash h) {
    absl::MutexLock lock(&s.mu);
    auto it = s.blocks.find(h);
    return it != s.blocks.end() && it->second == BlockData(h);
  }
  static void Seed(FakeState& s, BlockHash h) {
    absl::MutexLock lock(&s.mu);
    s.blocks[h] = BlockData(h);
  }
};

TEST(TieredStoreTest, CreateValidatesTiersAndParsesModes) {
  auto disk = std::make_shared<FakeState>();
  EXPECT_EQ(TieredStore::Create({}, nullptr, nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TieredStore::Create({}, std::make_unique<FakeTier>(TierKind::kHost, disk), nullptr, nullptr)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);  // not a HostTier
  EXPECT_EQ(
      TieredStore::Create({}, MakeHost(2),
                          std::make_unique<FakeTier>(TierKind::kDisk, disk, kBlock * 2), nullptr)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);  // block size mismatch
  EXPECT_EQ(TieredStore::Create({}, MakeHost(2), nullptr,
                                std::make_unique<FakeTier>(TierKind::kDisk, disk))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // a disk tier in the remote slot
  EXPECT_EQ(*ParseOffloadMode("write-back"), OffloadMode::kWriteBack);
  EXPECT_EQ(*ParseOffloadMode("write-through"), OffloadMode::kWriteThrough);
  EXPECT_EQ(ParseOffloadMode("write-around").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TieredStoreTest, WriteThroughAndWriteBackOffloadIntoHost) {
  for (OffloadMode mode : {OffloadMode::kWriteBack, OffloadMode::kWriteThrough}) {
    TieredStoreOptions options;
    options.offload = mode;
    Fixture f(options, 4, false, false);
    EXPECT_EQ(f.store->offload_mode(), mode);
    EXPECT_EQ(f.store->block_bytes(), kBlock);
    EXPECT_EQ(f.store->tier(TierKind::kDisk), nullptr);
    EXPECT_EQ(f.store->tier(TierKind::kDevice), nullptr);
    ASSERT_TRUE(f.Offload(1).ok());
    ASSERT_TRUE(f.Offload(1).ok());  // again: a use, still one copy
    std::vector<std::byte> out(kBlock);
    ASSERT_TRUE(f.store->ReadHost(1, out).ok());
    EXPECT_EQ(out, BlockData(1));
    EXPECT_EQ(f.store->ReadHost(2, out).code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(f.store->tier(TierKind::kHost)->usage().blocks, 1);
    EXPECT_EQ(f.store->cost(TierKind::kHost).samples, 1);
  }
}

// The offload without the extra copy: the caller fills a reserved G2 slot and commits it.
TEST(TieredStoreTest, ReservedOffloadSlotIsFilledInPlaceAndCommitted) {
  Fixture f({}, 2, false, false);
  const std::span<std::byte> pool = f.store->host_pool();
  auto slot = f.store->ReserveOffload({.hash = 1});
  ASSERT_TRUE(slot.ok()) << slot.status();
  ASSERT_EQ(slot->bytes.size(), kBlock);
  EXPECT_GE(slot->bytes.data(), pool.data());
  EXPECT_LE(slot->bytes.data() + kBlock, pool.data() + pool.size());
  const auto data = BlockData(1);
  std::copy(data.begin(), data.end(), slot->bytes.begin());
  EXPECT_TRUE(f.store->Locate(std::vector<BlockHash>{1}).empty());  // not before the commit
  ASSERT_TRUE(f.store->CommitOffload(slot->id).ok());
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(f.store->ReadHost(1, out).ok());
  EXPECT_EQ(out, data);
  // Present: nothing to write. Aborted: the slot is free again and nothing is stored.
  EXPECT_EQ(f.store->ReserveOffload({.hash = 1}).status().code(), absl::StatusCode::kAlreadyExists);
  auto aborted = f.store->ReserveOffload({.hash = 2});
  ASSERT_TRUE(aborted.ok());
  f.store->AbortOffload(aborted->id);
  EXPECT_EQ(f.store->ReadHost(2, out).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.store->tier(TierKind::kHost)->usage().blocks, 1);
  // A reservation evicts a stored block for room; with every slot reserved there is none.
  auto a = f.store->ReserveOffload({.hash = 3});
  ASSERT_TRUE(a.ok());
  auto b = f.store->ReserveOffload({.hash = 4});  // evicts 1
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(f.store->ReadHost(1, out).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(f.store->ReserveOffload({.hash = 5}).status().code(),
            absl::StatusCode::kResourceExhausted);
  f.store->AbortOffload(a->id);
  f.store->AbortOffload(b->id);
}

// Dynamo's filter: a block used once is not worth a disk write; used twice it is.
TEST(TieredStoreTest, FrequencyFilterAdmitsToDiskOnlyReusedBlocks) {
  TieredStoreOptions options;  // disk_admit_min_uses = 2
  Fixture f(options, 2, /*disk=*/true, /*remote=*/false);
  ASSERT_TRUE(f.Offload(1).ok());  // 1 use
  ASSERT_TRUE(f.Offload(2).ok());
  std::vector<BlockHash> used = {2};
  f.store->NoteUse(used);          // 2 uses
  ASSERT_TRUE(f.Offload(3).ok());  // evicts 1
  ASSERT_TRUE(f.Offload(4).ok());  // evicts 2
  f.store->Flush();
  EXPECT_FALSE(Fixture::Holds(*f.disk, 1));
  EXPECT_TRUE(Fixture::Holds(*f.disk, 2));

  options.disk_admit_min_uses = 1;
  Fixture every(options, 1, true, false);
  ASSERT_TRUE(every.Offload(1).ok());
  ASSERT_TRUE(every.Offload(2).ok());
  every.store->Flush();
  EXPECT_TRUE(Fixture::Holds(*every.disk, 1));
}

TEST(TieredStoreTest, DemotesToRemoteWhenConfigured) {
  TieredStoreOptions options;
  Fixture f(options, 1, /*disk=*/true, /*remote=*/true);
  ASSERT_TRUE(f.Offload(1).ok());
  ASSERT_TRUE(f.Offload(2).ok());  // evicts 1 (used once): remote only
  f.store->Flush();
  EXPECT_TRUE(Fixture::Holds(*f.remote, 1));
  EXPECT_FALSE(Fixture::Holds(*f.disk, 1));

  options.demote_to_remote = false;
  Fixture off(options, 1, false, true);
  ASSERT_TRUE(off.Offload(1).ok());
  ASSERT_TRUE(off.Offload(2).ok());
  off.store->Flush();
  EXPECT_FALSE(Fixture::Holds(*off.remote, 1));
}

// A block whose bytes changed in G2's memory after it was stored is not demoted when it is
// evicted: the eviction copy checks it against G2's checksum, so G3 and G4 never store it under
// a checksum of the corrupt bytes (which their reads would then accept). G2 counts the failure.
TEST(TieredStoreTest, CorruptHostBlockIsNotDemoted) {
  TieredStoreOptions options;
  options.disk_admit_min_uses = 1;
  Fixture f(options, 1, /*disk=*/true, /*remote=*/true);
  ASSERT_TRUE(f.Offload(1).ok());
  f.store->host_pool()[100] ^= std::byte{0x01};  // the pool's only slot holds block 1
  ASSERT_TRUE(f.Offload(2).ok());                // evicts 1
  ASSERT_TRUE(f.Offload(3).ok());                // evicts 2, intact
  f.store->Flush();
  EXPECT_FALSE(Fixture::Holds(*f.disk, 1));
  EXPECT_FALSE(Fixture::Holds(*f.remote, 1));
  EXPECT_TRUE(Fixture::Holds(*f.disk, 2));
  EXPECT_TRUE(Fixture::Holds(*f.remote, 2));
  EXPECT_EQ(f.store->tier(TierKind::kHost)->stats().checksum_failures, 1);
}

// A chain spread over the tiers: Locate names the fastest holder of each block, and Prefetch
// brings the run into G2 up to the first block nobody holds.
TEST(TieredStoreTest, LocateAndPrefetchFromDiskAndRemote) {
  Fixture f({}, 8, true, true);
  ASSERT_TRUE(f.Offload(1).ok());
  Fixture::Seed(*f.disk, 2);
  Fixture::Seed(*f.remote, 3);
  Fixture::Seed(*f.disk, 4);
  Fixture::Seed(*f.remote, 4);  // also remote: disk is preferred
  std::vector<BlockHash> chain = {1, 2, 3, 4, 5, 6};
  Fixture::Seed(*f.disk, 6);  // after a hole: unreachable
  f.remote->contains_calls = 0;
  EXPECT_THAT(f.store->Locate(chain),
              ElementsAre(TierKind::kHost, TierKind::kDisk, TierKind::kRemote, TierKind::kDisk));
  // The remote tier is asked once, for the prefix from block 3 on (the default CountPrefix
  // walks it: 3, 4, then 5 is absent).
  EXPECT_EQ(f.remote->contains_calls.load(), 3);

  std::vector<BlockMeta> blocks;
  for (BlockHash h : chain) blocks.push_back({.hash = h, .parent = h - 1});
  absl::Notification done;
  int fetched = -1;
  f.store->Prefetch(blocks, [&](int n, TieredStore::PrefetchPins) {
    fetched = n;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(fetched, 4);
  std::vector<std::byte> out(kBlock);
  for (BlockHash h : {1, 2, 3, 4}) {
    ASSERT_TRUE(f.store->ReadHost(h, out).ok()) << h;
    EXPECT_EQ(out, BlockData(h)) << h;
  }
  EXPECT_FALSE(f.store->tier(TierKind::kHost)->Contains(6));
  EXPECT_THAT(f.store->Locate(chain),
              ElementsAre(TierKind::kHost, TierKind::kHost, TierKind::kHost, TierKind::kHost));
  EXPECT_EQ(f.store->cost(TierKind::kDisk).samples, 2);  // runs {2} and {4}
  EXPECT_EQ(f.store->cost(TierKind::kRemote).samples, 1);
  EXPECT_GT(f.store->cost(TierKind::kDisk).bytes_per_second, 0);
  EXPECT_GE(f.store->cost(TierKind::kDisk).latency_seconds, 0);
  EXPECT_EQ(f.remote->stats.hits, 1);  // block 4 was not read from remote
}

// A run whose head is already in a full G2 and whose tail comes from disk: fetching the tail
// must not evict the head before the caller reads it (the pins hold it), and once the pins are
// dropped the blocks are ordinary residents again.
TEST(TieredStoreTest, PrefetchPinsTheRunUntilThePinsAreDropped) {
  Fixture f({}, 4, true, false);
  ASSERT_TRUE(f.Offload(1).ok());  // the run's head, least recently used of G2
  for (BlockHash h : {10, 11, 12}) ASSERT_TRUE(f.Offload(h).ok());  // G2 now full
  for (BlockHash h : {2, 3}) Fixture::Seed(*f.disk, h);
  absl::Notification done;
  int fetched = -1;
  TieredStore::PrefetchPins pins;
  f.store->Prefetch({{.hash = 1}, {.hash = 2, .parent = 1}, {.hash = 3, .parent = 2}},
                    [&](int n, TieredStore::PrefetchPins p) {
                      fetched = n;
                      pins = std::move(p);
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_EQ(fetched, 3);
  Tier* host = f.store->tier(TierKind::kHost);
  for (BlockHash h : {1, 2, 3}) EXPECT_TRUE(host->Contains(h)) << h;
  // Pressure while pinned: the run stays, one unpinned block makes room.
  ASSERT_TRUE(f.Offload(20).ok());
  for (BlockHash h : {1, 2, 3}) EXPECT_TRUE(host->Contains(h)) << h;
  // Every slot but one pinned: more pressure cycles that one slot, never the run.
  ASSERT_TRUE(f.Offload(21).ok());
  EXPECT_FALSE(host->Contains(20));
  for (BlockHash h : {1, 2, 3}) EXPECT_TRUE(host->Contains(h)) << h;
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(f.store->ReadHost(1, out).ok());
  EXPECT_EQ(out, BlockData(1));
  pins.reset();
  for (BlockHash h : {30, 31, 32, 33}) ASSERT_TRUE(f.Offload(h).ok());
  for (BlockHash h : {1, 2, 3}) EXPECT_FALSE(host->Contains(h)) << h << " still pinned";
}

TEST(TieredStoreTest, PrefetchStopsAtCorruptBlock) {
  Fixture f({}, 8, true, false);
  for (BlockHash h : {1, 2, 3}) Fixture::Seed(*f.disk, h);
  f.disk->corrupt.insert(2);
  absl::Notification done;
  int fetched = -1;
  f.store->Prefetch({{.hash = 1}, {.hash = 2}, {.hash = 3}}, [&](int n, TieredStore::PrefetchPins) {
    fetched = n;
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(fetched, 1);
  EXPECT_TRUE(f.store->tier(TierKind::kHost)->Contains(1));
  EXPECT_FALSE(f.store->tier(TierKind::kHost)->Contains(2));
  EXPECT_FALSE(f.store->tier(TierKind::kHost)->Contains(3));
}

TEST(TieredStoreTest, EventsFromEveryTier) {
  TieredStoreOptions options;
  options.disk_admit_min_uses = 1;
  Fixture f(options, 1, true, true);
  absl::Mutex mu;
  std::vector<std::tuple<TierKind, TierEvent::Kind, BlockHash>> events;
  f.store->SetEventListener([&](const TierEvent& e) {
    absl::MutexLock lock(&mu);
    events.emplace_back(e.tier, e.kind, e.hash);
  });
  ASSERT_TRUE(f.Offload(1).ok());
  ASSERT_TRUE(f.Offload(2, 1).ok());
  f.store->Flush();
  ASSERT_TRUE(f.store->tier(TierKind::kDisk)->Erase(1).ok());
  using K = TierEvent::Kind;
  absl::MutexLock lock(&mu);
  // The demoter's events interleave with the host's (other thread); each tier's own are ordered.
  EXPECT_THAT(events, ::testing::UnorderedElementsAre(std::tuple(TierKind::kHost, K::kStored, 1),
                                                      std::tuple(TierKind::kHost, K::kRemoved, 1),
                                                      std::tuple(TierKind::kHost, K::kStored, 2),
                                                      std::tuple(TierKind::kDisk, K::kStored, 1),
                                                      std::tuple(TierKind::kRemote, K::kStored, 1),
                                                      std::tuple(TierKind::kDisk, K::kRemoved, 1)));
  std::vector<std::tuple<TierKind, TierEvent::Kind, BlockHash>> host;
  for (const auto& e : events) {
    if (std::get<0>(e) == TierKind::kHost) host.push_back(e);
  }
  EXPECT_THAT(host, ElementsAre(std::tuple(TierKind::kHost, K::kStored, 1),
                                std::tuple(TierKind::kHost, K::kRemoved, 1),
                                std::tuple(TierKind::kHost, K::kStored, 2)));
}

TEST(TieredStoreTest, FullDemotionQueueDropsAndCounts) {
  metrics::Registry registry;
  TieredStoreOptions options;
  options.disk_admit_min_uses = 1;
  options.max_pending_demotions = 1;
  options.metrics = &registry;
  absl::Notification gate;
  auto disk = std::make_shared<FakeState>();
  disk->put_gate = &gate;
  auto store =
      std::move(TieredStore::Create(options, MakeHost(1),
                                    std::make_unique<FakeTier>(TierKind::kDisk, disk), nullptr))
          .value();
  // The demoter takes block 1 and waits on the gate; 2 is queued; 3 and 4 find the queue full.
  ASSERT_TRUE(store->Offload({.hash = 1}, BlockData(1)).ok());
  ASSERT_TRUE(store->Offload({.hash = 2}, BlockData(2)).ok());  // evicts 1
  while (disk->puts_entered.load() == 0) absl::SleepFor(absl::Milliseconds(1));
  for (BlockHash h = 3; h <= 5; ++h) ASSERT_TRUE(store->Offload({.hash = h}, BlockData(h)).ok());
  gate.Notify();
  store->Flush();
  const std::string text = registry.Serialize();
  EXPECT_THAT(text, HasSubstr("strata_kvstore_demotions_dropped_total 2"));
  EXPECT_THAT(text, HasSubstr("strata_kvstore_demotions_total{tier=\"disk\"} 2"));
  EXPECT_TRUE(Fixture::Holds(*disk, 1));
  EXPECT_TRUE(Fixture::Holds(*disk, 2));
}

TEST(TieredStoreTest, MetricsPerTierPassPromtool) {
  metrics::Registry registry;
  TieredStoreOptions options;
  options.metrics = &registry;
  options.disk_admit_min_uses = 1;
  Fixture f(options, 2, true, true);
  for (BlockHash h = 1; h <= 4; ++h) ASSERT_TRUE(f.Offload(h).ok());
  f.store->Flush();
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(f.store->ReadHost(4, out).ok());
  EXPECT_FALSE(f.store->ReadHost(1, out).ok());
  absl::Notification done;
  f.store->Prefetch({{.hash = 1}}, [&](int, TieredStore::PrefetchPins) { done.Notify(); });
  done.WaitForNotification();
  f.store->Flush();  // the prefetch evicted block 3: its demotion is written too

  const std::string text = registry.Serialize();
  for (const char* line : {"strata_kvstore_puts_total{tier=\"host\"} 5",
                           "strata_kvstore_evictions_total{tier=\"host\"} 3",
                           "strata_kvstore_hits_total{tier=\"host\"} 1",
                           "strata_kvstore_misses_total{tier=\"host\"} 1",
                           "strata_kvstore_puts_total{tier=\"disk\"} 3",
                           "strata_kvstore_puts_total{tier=\"remote\"} 3",
                           "strata_kvstore_hits_total{tier=\"disk\"} 1",
                           "strata_kvstore_usage_blocks{tier=\"host\"} 2",
                           "strata_kvstore_capacity_bytes{tier=\"host\"} 2048",
                           "strata_kvstore_checksum_failures_total{tier=\"disk\"} 0",
                           "strata_kvstore_rejected_total{tier=\"remote\"} 0",
                           "strata_kvstore_bytes_in_total{tier=\"host\"} 5120",
                           "strata_kvstore_bytes_out_total{tier=\"host\"} 1024",
                           "strata_kvstore_fetch_seconds_count{tier=\"disk\"} 1",
                           "strata_kvstore_fetch_seconds_count{tier=\"host\"} 1",
                           "strata_kvstore_demotions_total{tier=\"remote\"} 3"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  constexpr char kPromtool[] = "/usr/bin/promtool";
  if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed";
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string in = (dir / ("kvcore-metrics-" + std::to_string(getpid()) + ".txt")).string();
  const std::string lint_path = in + ".out";
  std::ofstream(in) << text;
  const int rc = std::system(
      (std::string(kPromtool) + " check metrics < " + in + " > " + lint_path + " 2>&1").c_str());
  std::ifstream result(lint_path);
  std::string lint((std::istreambuf_iterator<char>(result)), {});
  EXPECT_EQ(rc, 0) << lint;
  EXPECT_EQ(lint, "");
  std::remove(in.c_str());
  std::remove(lint_path.c_str());
}

// Destroying the store writes what was queued (no Flush needed) and stops its threads.
TEST(TieredStoreTest, DestructorDrainsDemotions) {
  TieredStoreOptions options;
  options.disk_admit_min_uses = 1;
  auto disk = std::make_shared<FakeState>();
  {
    Fixture f(options, 1, false, false);  // unused; checks a store without lower tiers stops
  }
  auto store =
      std::move(TieredStore::Create(options, MakeHost(1),
                                    std::make_unique<FakeTier>(TierKind::kDisk, disk), nullptr))
          .value();
  for (BlockHash h = 1; h <= 20; ++h) ASSERT_TRUE(store->Offload({.hash = h}, BlockData(h)).ok());
  store.reset();
  for (BlockHash h = 1; h < 20; ++h) EXPECT_TRUE(Fixture::Holds(*disk, h)) << h;
}

}  // namespace
}  // namespace strata::kvstore
