// G4 membership at run time (RemoteTier::SetDaemons): a tier with no daemon, daemons joining and
// leaving while blocks are stored and read, what a leaving daemon is owed reaching it, and
// changes racing with transfers. Real KvStoreServers over gRPC + UCX on loopback.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "remote_test_util.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/kvstore/remote_tier.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;

constexpr size_t kBlock = 32 << 10;

std::unique_ptr<KvStoreServer> StartServer(const std::string& id, int64_t capacity_blocks) {
  return testing::StartTestServer(id, capacity_blocks * int64_t{kBlock}, kBlock);
}

std::unique_ptr<RemoteTier> Connect(std::vector<std::string> daemons,
                                    absl::Duration settle_delay = absl::Milliseconds(2)) {
  RemoteTierOptions o = ClientOptions(std::move(daemons), kBlock);
  o.settle_delay = settle_delay;
  auto t = RemoteTier::Create(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// The blocks a daemon holds (committed), asked by a client of its own.
int64_t Held(const KvStoreServer& server) {
  auto client = Connect({server.address()});
  return client == nullptr ? -1 : static_cast<int64_t>(client->usage().blocks);
}

bool ReadsBack(RemoteTier& tier, BlockHash hash) {
  std::vector<std::byte> out(kBlock);
  return tier.Get(hash, out).ok() && out == MakeBlock(kBlock, hash);
}

TEST(RemoteMembershipTest, WithNoDaemonPutsAreRejectedAndReadsMiss) {
  auto tier = Connect({});
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->daemons().empty());
  EXPECT_EQ(tier->DaemonFor(1), -1);
  EXPECT_EQ(tier->connected_daemons(), 0);
  EXPECT_TRUE(absl::IsUnavailable(tier->Put({.hash = 1}, MakeBlock(kBlock, 1))));
  std::vector<std::byte> out(kBlock);
  EXPECT_FALSE(tier->Get(1, out).ok());
  const std::vector<BlockHash> chain = {1, 2};
  EXPECT_EQ(tier->CountPrefix(chain), 0);
  EXPECT_FALSE(tier->Contains(1));
  EXPECT_TRUE(absl::IsUnavailable(tier->Erase(1)));
  EXPECT_EQ(tier->stats().rejected, 1);
  EXPECT_EQ(tier->stats().misses, 1);
  EXPECT_EQ(tier->usage().blocks, 0);
}

TEST(RemoteMembershipTest, DaemonsJoinAndLeave) {
  auto a = StartServer("kvs-join-a", 256);
  auto b = StartServer("kvs-join-b", 256);
  auto tier = Connect({});
  ASSERT_NE(tier, nullptr);

  // One daemon joins: every block lives on it.
  tier->SetDaemons({a->address(), a->address()});  // a duplicate is dropped
  EXPECT_EQ(tier->daemons(), std::vector<std::string>{a->address()});
  EXPECT_EQ(tier->connected_daemons(), 1);
  constexpr int kBlocks = 64;
  for (BlockHash h = 1; h <= kBlocks; ++h) {
    ASSERT_TRUE(tier->Put({.hash = h}, MakeBlock(kBlock, h)).ok()) << h;
  }
  tier->Flush();

  // A second joins: the blocks that now hash to it miss until written there again; the rest
  // are still read from the first, over the connection it already had.
  tier->SetDaemons({a->address(), b->address()});
  EXPECT_EQ(tier->connected_daemons(), 2);
  const std::vector<std::string> both = {a->address(), b->address()};
  std::vector<BlockHash> on_a, on_b;
  for (BlockHash h = 1; h <= kBlocks; ++h) {
    EXPECT_EQ(tier->DaemonFor(h), RendezvousPick(h, both)) << h;
    (tier->DaemonFor(h) == 0 ? on_a : on_b).push_back(h);
  }
  ASSERT_FALSE(on_a.empty());
  ASSERT_FALSE(on_b.empty());
  for (BlockHash h : on_a) EXPECT_TRUE(ReadsBack(*tier, h)) << h;
  for (BlockHash h : on_b) EXPECT_FALSE(tier->Contains(h)) << h;
  for (BlockHash h : on_b) ASSERT_TRUE(tier->Put({.hash = h}, MakeBlock(kBlock, h)).ok()) << h;
  for (BlockHash h = 1; h <= kBlocks; ++h) EXPECT_TRUE(ReadsBack(*tier, h)) << h;
  tier->Flush();
  // Another client that lists the same two daemons from the start agrees on every home.
  auto other = Connect({b->address(), a->address()});
  for (BlockHash h = 1; h <= kBlocks; ++h) EXPECT_TRUE(ReadsBack(*other, h)) << h;

  // The first leaves: only the second's blocks are read now (the first still holds its own).
  tier->SetDaemons({b->address()});
  EXPECT_EQ(tier->daemons(), std::vector<std::string>{b->address()});
  EXPECT_EQ(tier->connected_daemons(), 1);
  for (BlockHash h : on_b) EXPECT_TRUE(ReadsBack(*tier, h)) << h;
  for (BlockHash h : on_a) EXPECT_FALSE(tier->Contains(h)) << h;
  auto only_a = Connect({a->address()});
  EXPECT_TRUE(ReadsBack(*only_a, on_a.front()));

  // And comes back (a new connection, as after a restart of the worker's view of it).
  tier->SetDaemons({b->address(), a->address()});
  EXPECT_EQ(tier->connected_daemons(), 2);
  for (BlockHash h = 1; h <= kBlocks; ++h) EXPECT_TRUE(ReadsBack(*tier, h)) << h;

  // None left: puts are rejected and reads miss, and the daemons keep their blocks.
  tier->SetDaemons({});
  EXPECT_TRUE(absl::IsUnavailable(tier->Put({.hash = 999}, MakeBlock(kBlock, 999))));
  EXPECT_FALSE(tier->Contains(on_a.front()));
  EXPECT_EQ(Held(*a), kBlocks);
  EXPECT_EQ(Held(*b), static_cast<int64_t>(on_b.size()));
}

TEST(RemoteMembershipTest, ALeavingDaemonGetsWhatItIsOwedFirst) {
  auto a = StartServer("kvs-owed-a", 64);
  // Commits wait up to a minute for a request to carry them: only the leave can send them.
  auto tier = Connect({a->address()}, absl::Minutes(1));
  ASSERT_NE(tier, nullptr);
  for (BlockHash h = 1; h <= 8; ++h) {
    ASSERT_TRUE(tier->Put({.hash = h}, MakeBlock(kBlock, h)).ok()) << h;
  }
  // Each put's request carried the commit of the one before; the last commit is still owed.
  EXPECT_EQ(Held(*a), 7);
  tier->SetDaemons({});
  EXPECT_EQ(Held(*a), 8);
  EXPECT_EQ(tier->stats().puts, 8);
  auto reader = Connect({a->address()});
  for (BlockHash h = 1; h <= 8; ++h) EXPECT_TRUE(ReadsBack(*reader, h)) << h;
}

TEST(RemoteMembershipTest, ChangesRacingWithTransfersServeOnlyVerifiedBlocks) {
  auto a = StartServer("kvs-race-a", 512);
  auto b = StartServer("kvs-race-b", 512);
  auto tier = Connect({a->address()});
  ASSERT_NE(tier, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> read_ok{0}, wrong{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&, t] {
      std::vector<std::byte> out(kBlock);
      for (BlockHash i = 0; !stop.load(); ++i) {
        // Puts and gets each go over all 96 hashes, in different orders.
        if (i % 2 == 0) {
          const BlockHash h = 1 + (i / 2 * 5 + t * 31) % 96;
          (void)tier->Put({.hash = h}, MakeBlock(kBlock, h));
        } else if (const BlockHash h = 1 + (i / 2 * 11 + t) % 96; tier->Get(h, out).ok()) {
          ++read_ok;
          if (out != MakeBlock(kBlock, h)) ++wrong;
        }
      }
    });
  }
  const std::vector<std::vector<std::string>> memberships = {{a->address(), b->address()},
                                                             {b->address()},
                                                             {},
                                                             {a->address()},
                                                             {b->address(), a->address()}};
  for (int round = 0; round < 20; ++round) {
    tier->SetDaemons(memberships[round % memberships.size()]);
    absl::SleepFor(absl::Milliseconds(20));
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(read_ok.load(), 0);
  EXPECT_EQ(tier->stats().checksum_failures, 0);
  // Settled and consistent afterwards: what the tier writes now it reads back.
  tier->SetDaemons({a->address(), b->address()});
  for (BlockHash h = 1000; h < 1016; ++h) {
    ASSERT_TRUE(tier->Put({.hash = h}, MakeBlock(kBlock, h)).ok()) << h;
    EXPECT_TRUE(ReadsBack(*tier, h)) << h;
  }
}

}  // namespace
}  // namespace strata::kvstore
