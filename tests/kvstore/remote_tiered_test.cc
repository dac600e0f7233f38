// TieredStore over a real G2 HostTier and a real G4 RemoteTier (a KvStoreServer in this
// process, gRPC + UCX on loopback): G4 -> G2 prefetches land straight in G2 pool slots through
// the registered-memory path, checksums verified, and no slot is leaked when a run stops early.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "absl/synchronization/notification.h"
#include "remote_test_util.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/kvstore/remote_tier.h"
#include "strata/kvstore/tiered_store.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;

constexpr size_t kBlock = 64 << 10;
constexpr int64_t kHostBlocks = 16;

struct Stack {
  std::unique_ptr<KvStoreServer> server;
  RemoteTier* remote = nullptr;  // owned by the store
  HostTier* host = nullptr;      // owned by the store
  std::unique_ptr<TieredStore> store;
};

Stack Start(const std::string& id) {
  Stack s;
  KvStoreServerOptions so;
  so.id = id;
  so.capacity_bytes = 64 * int64_t{kBlock};
  so.block_bytes = kBlock;
  auto server = KvStoreServer::Create(so);
  EXPECT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->Start().ok());
  s.server = std::move(*server);
  auto remote = RemoteTier::Create(ClientOptions({s.server->address()}, kBlock));
  EXPECT_TRUE(remote.ok()) << remote.status();
  HostTierOptions ho;
  ho.block_bytes = kBlock;
  ho.capacity_bytes = kHostBlocks * int64_t{kBlock};
  auto host = HostTier::Create(ho);
  EXPECT_TRUE(host.ok()) << host.status();
  s.remote = remote->get();
  s.host = host->get();
  auto store = TieredStore::Create({}, std::move(*host), nullptr, std::move(*remote));
  EXPECT_TRUE(store.ok()) << store.status();
  s.store = std::move(*store);
  return s;
}

std::vector<BlockMeta> Chain(uint64_t first, int n) {
  std::vector<BlockMeta> metas;
  for (int i = 0; i < n; ++i) metas.push_back({.hash = first + uint64_t(i), .parent = 0});
  return metas;
}

// Stores the chain in G4 only (through the staging path: heap memory).
void SeedRemote(RemoteTier& remote, const std::vector<BlockMeta>& metas) {
  std::vector<std::byte> data;
  for (const BlockMeta& m : metas) {
    const auto b = MakeBlock(kBlock, m.hash);
    data.insert(data.end(), b.begin(), b.end());
  }
  ASSERT_TRUE(remote.PutRun(metas, data).ok());
  remote.Flush();  // committed on the daemon before the test reaches into it
}

int PrefetchBlocking(TieredStore& store, std::vector<BlockMeta> blocks) {
  absl::Notification done;
  int fetched = -1;
  store.Prefetch(std::move(blocks), [&](int n, TieredStore::PrefetchPins) {
    fetched = n;
    done.Notify();
  });
  done.WaitForNotification();
  return fetched;
}

TEST(RemoteTieredTest, PrefetchLandsInHostSlotsWithoutStaging) {
  Stack s = Start("kvs-tiered");
  const auto chain = Chain(500, 10);
  SeedRemote(*s.remote, chain);
  const int64_t staged_before = s.remote->path_stats().staged_blocks;
  // Block 503 is in G2 already: it is leased, not fetched.
  ASSERT_TRUE(s.store->Offload(chain[3], MakeBlock(kBlock, 503)).ok());
  auto blocks = chain;
  blocks.push_back({.hash = 9999});  // nobody holds it: the run ends here
  EXPECT_EQ(PrefetchBlocking(*s.store, blocks), 10);
  std::vector<std::byte> out(kBlock);
  for (const BlockMeta& m : chain) {
    ASSERT_TRUE(s.store->ReadHost(m.hash, out).ok()) << m.hash;
    EXPECT_EQ(out, MakeBlock(kBlock, m.hash)) << m.hash;
  }
  EXPECT_EQ(s.remote->path_stats().direct_blocks, 9);
  EXPECT_EQ(s.remote->path_stats().staged_blocks, staged_before) << "a fetch used staging";
  EXPECT_EQ(s.host->stats().puts, 10);  // 9 commits + 1 offload
  EXPECT_EQ(s.store->cost(TierKind::kRemote).samples, 2);  // two runs: 500-502, 504-509
}

// A corrupt G4 copy ends the run: it is never committed to G2, counted as a checksum failure,
// and every slot reserved for the rest of the run is given back (G2 still fills completely).
TEST(RemoteTieredTest, CorruptBlockEndsTheRunAndLeaksNoSlot) {
  Stack s = Start("kvs-tiered-corrupt");
  const auto chain = Chain(700, 8);
  SeedRemote(*s.remote, chain);
  ASSERT_TRUE(s.server->CorruptBlockForTest(703).ok());
  EXPECT_EQ(PrefetchBlocking(*s.store, chain), 3);
  EXPECT_EQ(s.remote->stats().checksum_failures, 1);
  EXPECT_FALSE(s.host->Contains(703));
  EXPECT_FALSE(s.host->Contains(704));
  EXPECT_EQ(s.host->usage().blocks, 3);
  // The pins are gone (the callback dropped them): every one of the G2 slots can be filled.
  for (uint64_t h = 1; h <= uint64_t{kHostBlocks}; ++h) {
    ASSERT_TRUE(s.store->Offload({.hash = h}, MakeBlock(kBlock, h)).ok()) << h;
  }
  EXPECT_EQ(s.host->usage().blocks, kHostBlocks);
}

// More blocks than G2 holds: the fetch stops when every slot is leased by the run itself.
TEST(RemoteTieredTest, RunLongerThanHostStopsWhenHostIsFull) {
  Stack s = Start("kvs-tiered-full");
  const auto chain = Chain(900, 24);
  SeedRemote(*s.remote, chain);
  EXPECT_EQ(PrefetchBlocking(*s.store, chain), kHostBlocks);
  std::vector<std::byte> out(kBlock);
  ASSERT_TRUE(s.store->ReadHost(900, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 900));
}

// Offloads that overflow G2 demote the evicted blocks to G4 (in batches: PutBlocks); after a
// Flush every evicted block is in G4, byte-exact, and G4 counted each put once.
TEST(RemoteTieredTest, DemotionsReachTheRemoteTier) {
  Stack s = Start("kvs-tiered-demote");
  constexpr int kBlocks = 48;
  for (uint64_t h = 1; h <= kBlocks; ++h) {
    ASSERT_TRUE(s.store->Offload({.hash = h, .parent = h - 1}, MakeBlock(kBlock, h)).ok()) << h;
  }
  s.store->Flush();
  s.remote->Flush();  // the last batch's commits (stats count confirmed puts)
  const int evicted = kBlocks - static_cast<int>(kHostBlocks);
  EXPECT_EQ(s.remote->stats().puts, evicted);
  std::vector<BlockHash> hashes;
  for (uint64_t h = 1; h <= uint64_t(evicted); ++h) hashes.push_back(h);
  std::vector<std::byte> out(hashes.size() * kBlock);
  auto n = s.remote->GetRun(hashes, out);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, evicted);
  for (int i = 0; i < evicted; ++i) {
    const auto expect = MakeBlock(kBlock, hashes[i]);
    ASSERT_TRUE(std::equal(expect.begin(), expect.end(), out.begin() + i * kBlock)) << i;
  }
}

}  // namespace
}  // namespace strata::kvstore
