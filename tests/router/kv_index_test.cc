// strata::router::KvIndex: event folding, prefix matching, worker removal, and a randomized
// check against a brute-force model.
#include "strata/router/kv_index.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::router {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr Tier kGpu = Tier::kGpu;
constexpr Tier kHost = Tier::kHostPinned;
constexpr Tier kDisk = Tier::kDisk;

KvEvent Stored(BlockHash hash, BlockHash parent = kRootBlockHash) {
  return KvEvent{KvEvent::Kind::kStored, hash, parent};
}
KvEvent Removed(BlockHash hash) { return KvEvent{KvEvent::Kind::kRemoved, hash, 0}; }

// A chain of distinct non-zero hashes: base+1, base+2, ...
std::vector<BlockHash> Chain(BlockHash base, int n) {
  std::vector<BlockHash> chain;
  for (int i = 0; i < n; ++i) chain.push_back(base + i + 1);
  return chain;
}

// Stores chain[0, n) for (worker, tier).
void StorePrefix(KvIndex& index, WorkerId worker, Tier tier, const std::vector<BlockHash>& chain,
                 int n) {
  for (int i = 0; i < n; ++i) {
    BlockHash parent = i == 0 ? kRootBlockHash : chain[i - 1];
    ASSERT_TRUE(index.Apply(worker, tier, Stored(chain[i], parent)).ok());
  }
}

WorkerMatch Match(WorkerId worker, int32_t blocks, std::array<int32_t, kNumTiers> tiers) {
  return WorkerMatch{worker, blocks, tiers};
}

TEST(KvIndexTest, StoredThenRemoved) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  std::vector<BlockHash> chain = Chain(100, 4);
  StorePrefix(index, 1, kGpu, chain, 4);
  EXPECT_EQ(index.num_blocks(), 4);
  EXPECT_EQ(index.num_worker_blocks(1), 4);
  EXPECT_EQ(index.num_worker_blocks(1, kGpu), 4);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {4, 0, 0, 0})));

  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[2])).ok());
  EXPECT_EQ(index.num_blocks(), 3);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 2, {2, 0, 0, 0})));

  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[0])).ok());
  EXPECT_THAT(index.MatchPrefix(chain), IsEmpty());
  EXPECT_EQ(index.num_worker_blocks(1), 2);
}

// A placement's blocks match at once, before the worker reports them; unconfirmed ones go at
// their deadline, confirmed ones stay.
TEST(KvIndexTest, RoutedBlocksMatchAtOnceUntilTheWorkerSaysOrTheirDeadline) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  const std::vector<BlockHash> chain = Chain(100, 4);
  ASSERT_TRUE(index.NoteRouted(1, chain, /*now_s=*/10.0, /*ttl_s=*/5.0).ok());
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {4, 0, 0, 0})));
  EXPECT_EQ(index.stats().provisional_stores, 4);
  EXPECT_EQ(index.stats().events_applied, 0);
  // The worker reports the first two blocks (computed), not the other two.
  StorePrefix(index, 1, kGpu, chain, 2);
  index.ExpireProvisional(14.9);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {4, 0, 0, 0})));
  index.ExpireProvisional(15.0);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 2, {2, 0, 0, 0})));
  EXPECT_EQ(index.stats().provisional_expired, 2);
  EXPECT_EQ(index.num_worker_blocks(1), 2);
  // An unknown worker is refused; routing to another adds only what it lacks.
  EXPECT_EQ(index.NoteRouted(7, chain, 20.0, 5.0).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(index.NoteRouted(2, chain, 20.0, 5.0).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 2, {2, 0, 0, 0}), Match(2, 4, {4, 0, 0, 0})));
}

// The worker's events replace provisional entries: a block it stored in another tier is not
// left in kGpu, a removed one goes; blocks it already holds are not made provisional; a cleared
// device tier or a removed worker drops them.
TEST(KvIndexTest, WorkerEventsReplaceProvisionalEntries) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  const std::vector<BlockHash> chain = Chain(0, 4);
  StorePrefix(index, 1, kHost, chain, 1);  // block 0 already in G2
  ASSERT_TRUE(index.NoteRouted(1, chain, 0.0, 5.0).ok());
  EXPECT_EQ(index.stats().provisional_stores, 3);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {0, 1, 0, 0})));
  ASSERT_TRUE(index.Apply(1, kHost, Stored(chain[1], chain[0])).ok());
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[2])).ok());
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 2, {0, 2, 0, 0})));
  index.ExpireProvisional(100.0);  // block 3 was never confirmed
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 2, {0, 2, 0, 0})));
  EXPECT_EQ(index.stats().provisional_expired, 1);
  EXPECT_EQ(index.num_worker_blocks(1, kGpu), 0);

  ASSERT_TRUE(index.NoteRouted(1, Chain(50, 3), 200.0, 5.0).ok());
  ASSERT_TRUE(index.Apply(1, kGpu, KvEvent{KvEvent::Kind::kCleared, 0, 0}).ok());
  EXPECT_THAT(index.MatchPrefix(Chain(50, 3)), IsEmpty());
  ASSERT_TRUE(index.NoteRouted(1, Chain(70, 3), 300.0, 5.0).ok());
  ASSERT_TRUE(index.RemoveWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  EXPECT_THAT(index.MatchPrefix(Chain(70, 3)), IsEmpty());
  index.ExpireProvisional(1000.0);  // stale deadlines of the removed worker: nothing to drop
  EXPECT_EQ(index.num_blocks(), 0);
}

TEST(KvIndexTest, PartialPrefixIsContiguousFromZero) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(7).ok());
  std::vector<BlockHash> chain = Chain(0, 5);
  // Holds blocks 0, 1, 3, 4: the match stops at the hole at 2.
  for (int i : {0, 1, 3, 4}) ASSERT_TRUE(index.Apply(7, kGpu, Stored(chain[i])).ok());
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(7, 2, {2, 0, 0, 0})));
  // A query that is a strict prefix of what is held, and one that diverges.
  EXPECT_THAT(index.MatchPrefix(std::span(chain).first(1)), ElementsAre(Match(7, 1, {1, 0, 0, 0})));
  std::vector<BlockHash> other = {chain[0], 999, chain[2]};
  EXPECT_THAT(index.MatchPrefix(other), ElementsAre(Match(7, 1, {1, 0, 0, 0})));
  // A chained hash names its whole prefix, so a query may start at any held block; one that
  // starts at an unheld block matches nothing.
  std::vector<BlockHash> tail = {chain[3], chain[4]};
  EXPECT_THAT(index.MatchPrefix(tail), ElementsAre(Match(7, 2, {2, 0, 0, 0})));
  EXPECT_THAT(index.MatchPrefix(std::vector<BlockHash>{chain[2], chain[3]}), IsEmpty());
  EXPECT_THAT(index.MatchPrefix({}), IsEmpty());
}

TEST(KvIndexTest, LongChainsMatchAcrossLookupWindows) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  std::vector<BlockHash> chain = Chain(1000, 100);
  StorePrefix(index, 1, kGpu, chain, 100);
  StorePrefix(index, 2, kHost, chain, 100);
  ASSERT_TRUE(index.Apply(2, kHost, Removed(chain[47])).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 100, {100, 0, 0, 0}), Match(2, 47, {0, 47, 0, 0})));
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[16])).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 16, {16, 0, 0, 0}), Match(2, 47, {0, 47, 0, 0})));
}

TEST(KvIndexTest, WorkersHoldDifferentPrefixLengths) {
  KvIndex index;
  for (WorkerId w : {3, 1, 2, 4}) ASSERT_TRUE(index.RegisterWorker(w).ok());
  std::vector<BlockHash> chain = Chain(50, 8);
  StorePrefix(index, 1, kGpu, chain, 8);
  StorePrefix(index, 2, kGpu, chain, 3);
  StorePrefix(index, 3, kGpu, chain, 5);
  // Worker 4 holds only a different chain.
  StorePrefix(index, 4, kGpu, Chain(500, 3), 3);
  EXPECT_EQ(index.num_blocks(), 11);
  EXPECT_THAT(
      index.MatchPrefix(chain),
      ElementsAre(Match(1, 8, {8, 0, 0, 0}), Match(2, 3, {3, 0, 0, 0}), Match(3, 5, {5, 0, 0, 0})));
}

TEST(KvIndexTest, TiersReported) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  std::vector<BlockHash> chain = Chain(10, 6);
  // Worker 1: blocks 0-5 on disk, 0-3 also in host memory, 0-1 also in GPU.
  StorePrefix(index, 1, kDisk, chain, 6);
  StorePrefix(index, 1, kHost, chain, 4);
  StorePrefix(index, 1, kGpu, chain, 2);
  // Worker 2: blocks 0-2 in GPU, 3-4 only remote: a mixed-tier prefix of 5.
  StorePrefix(index, 2, kGpu, chain, 3);
  for (int i : {3, 4}) ASSERT_TRUE(index.Apply(2, Tier::kRemote, Stored(chain[i])).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 6, {2, 4, 6, 0}), Match(2, 5, {3, 0, 0, 0})));
  EXPECT_EQ(index.num_worker_blocks(1), 6);
  EXPECT_EQ(index.num_worker_blocks(1, kHost), 4);
  EXPECT_EQ(index.num_worker_blocks(2, Tier::kRemote), 2);
  // Evicting block 0 from GPU keeps worker 1's overall prefix but ends its GPU prefix.
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[0])).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 6, {0, 4, 6, 0}), Match(2, 5, {3, 0, 0, 0})));
  EXPECT_EQ(index.num_worker_blocks(1), 6);
}

TEST(KvIndexTest, RemoveWorkerPrunesItsBlocks) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  std::vector<BlockHash> chain = Chain(0, 4);
  StorePrefix(index, 1, kGpu, chain, 4);
  StorePrefix(index, 1, kHost, chain, 4);
  StorePrefix(index, 2, kGpu, chain, 2);
  StorePrefix(index, 2, kGpu, Chain(100, 3), 3);
  EXPECT_EQ(index.num_blocks(), 7);

  ASSERT_TRUE(index.RemoveWorker(2).ok());
  EXPECT_EQ(index.num_workers(), 1);
  EXPECT_EQ(index.num_blocks(), 4);
  EXPECT_EQ(index.num_worker_blocks(2), 0);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {4, 4, 0, 0})));
  EXPECT_EQ(index.RemoveWorker(2).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(index.Apply(2, kGpu, Stored(1)).code(), absl::StatusCode::kNotFound);

  // Re-registering (its slot is reused) starts from nothing.
  ASSERT_TRUE(index.RegisterWorker(9).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 4, {4, 4, 0, 0})));
  ASSERT_TRUE(index.RemoveWorker(1).ok());
  EXPECT_EQ(index.num_blocks(), 0);
  EXPECT_THAT(index.MatchPrefix(chain), IsEmpty());
}

TEST(KvIndexTest, ClearedDropsOneTierOfOneWorker) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  std::vector<BlockHash> chain = Chain(0, 4);
  StorePrefix(index, 1, kGpu, chain, 4);
  StorePrefix(index, 1, kHost, chain, 2);
  StorePrefix(index, 2, kGpu, chain, 3);
  const KvEvent cleared{KvEvent::Kind::kCleared, 0, 0};
  ASSERT_TRUE(index.Apply(1, kGpu, cleared).ok());
  // Worker 1 keeps its host tier; worker 2 is untouched.
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 2, {0, 2, 0, 0}), Match(2, 3, {3, 0, 0, 0})));
  EXPECT_EQ(index.num_worker_blocks(1, kGpu), 0);
  EXPECT_EQ(index.num_worker_blocks(1), 2);
  // A resync: cleared, then the tier's whole contents, replaces what was indexed.
  std::vector<KvEvent> resync = {cleared, Stored(chain[0]), Stored(chain[1], chain[0])};
  ASSERT_TRUE(index.ApplyBatch(1, kHost, resync).ok());
  std::vector<KvEvent> resync2 = {cleared, Stored(chain[0])};
  ASSERT_TRUE(index.ApplyBatch(2, kGpu, resync2).ok());
  EXPECT_THAT(index.MatchPrefix(chain),
              ElementsAre(Match(1, 2, {0, 2, 0, 0}), Match(2, 1, {1, 0, 0, 0})));
  ASSERT_TRUE(index.Apply(1, kHost, cleared).ok());
  ASSERT_TRUE(index.Apply(1, kHost, cleared).ok());  // clearing an empty tier changes nothing
  EXPECT_EQ(index.num_worker_blocks(1), 0);
  EXPECT_EQ(index.num_blocks(), 1);
}

TEST(KvIndexTest, DuplicateEventsAreIdempotent) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  EXPECT_EQ(index.RegisterWorker(1).code(), absl::StatusCode::kAlreadyExists);
  std::vector<BlockHash> chain = Chain(0, 3);
  StorePrefix(index, 1, kGpu, chain, 3);
  StorePrefix(index, 1, kGpu, chain, 3);
  EXPECT_EQ(index.num_blocks(), 3);
  EXPECT_EQ(index.num_worker_blocks(1, kGpu), 3);
  EXPECT_EQ(index.stats().duplicate_stores, 3);
  EXPECT_EQ(index.stats().events_applied, 3);
  // One removal undoes the (single) stored state; the second removal is a no-op.
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[1])).ok());
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(chain[1])).ok());
  EXPECT_EQ(index.num_worker_blocks(1, kGpu), 2);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 1, {1, 0, 0, 0})));
  EXPECT_EQ(index.stats().unknown_removes, 1);
}

TEST(KvIndexTest, RemovalOfUnknownBlocksIsHarmless) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  ASSERT_TRUE(index.RegisterWorker(2).ok());
  std::vector<BlockHash> chain = Chain(0, 2);
  StorePrefix(index, 1, kGpu, chain, 2);
  ASSERT_TRUE(index.Apply(1, kGpu, Removed(12345)).ok());      // never stored anywhere
  ASSERT_TRUE(index.Apply(2, kGpu, Removed(chain[0])).ok());   // stored, but by worker 1
  ASSERT_TRUE(index.Apply(1, kDisk, Removed(chain[0])).ok());  // stored, but in another tier
  EXPECT_EQ(index.stats().unknown_removes, 3);
  EXPECT_EQ(index.num_blocks(), 2);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 2, {2, 0, 0, 0})));
}

TEST(KvIndexTest, OrphanEventsAreIndexedAndCounted) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  std::vector<BlockHash> chain = Chain(0, 3);
  // Children arrive before their parents (reordered stream).
  ASSERT_TRUE(index.Apply(1, kGpu, Stored(chain[2], chain[1])).ok());
  ASSERT_TRUE(index.Apply(1, kGpu, Stored(chain[1], chain[0])).ok());
  EXPECT_EQ(index.stats().orphan_stores, 2);
  EXPECT_THAT(index.MatchPrefix(chain), IsEmpty());
  ASSERT_TRUE(index.Apply(1, kGpu, Stored(chain[0])).ok());
  EXPECT_EQ(index.stats().orphan_stores, 2);
  EXPECT_THAT(index.MatchPrefix(chain), ElementsAre(Match(1, 3, {3, 0, 0, 0})));
}

TEST(KvIndexTest, RejectsBadInput) {
  KvIndex index;
  ASSERT_TRUE(index.RegisterWorker(1).ok());
  EXPECT_EQ(index.Apply(1, static_cast<Tier>(7), Stored(1)).code(),
            absl::StatusCode::kInvalidArgument);
  KvEvent bad = Stored(1);
  bad.kind = static_cast<KvEvent::Kind>(9);
  EXPECT_EQ(index.Apply(1, kGpu, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index.num_blocks(), 0);
  std::vector<KvEvent> batch = {Stored(1), Stored(2, 1), bad, Stored(3, 2)};
  EXPECT_EQ(index.ApplyBatch(1, kGpu, batch).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index.num_blocks(), 2);  // events before the bad one stay applied
}

// ---- randomized check against a brute-force model ----------------------------------------

// The model: the set of (worker, tier, hash) triples currently held.
using Model = std::set<std::tuple<WorkerId, int, BlockHash>>;

std::vector<WorkerMatch> NaiveMatch(const Model& model, const std::set<WorkerId>& workers,
                                    const std::vector<BlockHash>& chain) {
  std::vector<WorkerMatch> out;
  for (WorkerId w : workers) {
    WorkerMatch m{w, 0, {}};
    auto held = [&](int t, BlockHash h) { return model.contains({w, t, h}); };
    auto held_any = [&](BlockHash h) {
      for (int t = 0; t < kNumTiers; ++t) {
        if (held(t, h)) return true;
      }
      return false;
    };
    while (m.blocks < static_cast<int32_t>(chain.size()) && held_any(chain[m.blocks])) ++m.blocks;
    for (int t = 0; t < kNumTiers; ++t) {
      while (m.tier_blocks[t] < m.blocks && held(t, chain[m.tier_blocks[t]])) ++m.tier_blocks[t];
    }
    if (m.blocks > 0) out.push_back(m);
  }
  return out;
}

TEST(KvIndexTest, RandomizedAgainstBruteForce) {
  constexpr int kWorkers = 8;
  constexpr int kChains = 12;
  constexpr int kChainLen = 40;  // longer than MatchPrefix's 16-block lookup window
  std::mt19937_64 rng(20261130);
  std::vector<std::vector<BlockHash>> chains;
  for (int c = 0; c < kChains; ++c) {
    // Chains share prefixes: a chain forks off an earlier one at a random point.
    std::vector<BlockHash> chain;
    if (c > 0) {
      const auto& base = chains[rng() % chains.size()];
      chain.assign(base.begin(), base.begin() + rng() % kChainLen);
    }
    while (chain.size() < kChainLen) chain.push_back(rng() | 1);
    chains.push_back(chain);
  }
  KvIndex index;
  Model model;
  std::set<WorkerId> workers;
  for (WorkerId w = 0; w < kWorkers; ++w) {
    ASSERT_TRUE(index.RegisterWorker(w).ok());
    workers.insert(w);
  }
  int queries = 0;
  for (int op = 0; op < 20000; ++op) {
    const WorkerId w = static_cast<WorkerId>(rng() % kWorkers);
    const auto& chain = chains[rng() % kChains];
    const int pos = static_cast<int>(rng() % kChainLen);
    const int tier = static_cast<int>(rng() % kNumTiers);
    const uint64_t dice = rng() % 100;
    if (dice < 2) {  // a worker dies and comes back empty
      ASSERT_TRUE(index.RemoveWorker(w).ok());
      ASSERT_TRUE(index.RegisterWorker(w).ok());
      std::erase_if(model, [w](const auto& e) { return std::get<0>(e) == w; });
    } else if (dice < 55) {
      BlockHash parent = pos == 0 ? kRootBlockHash : chain[pos - 1];
      ASSERT_TRUE(index.Apply(w, static_cast<Tier>(tier), Stored(chain[pos], parent)).ok());
      model.insert({w, tier, chain[pos]});
    } else if (dice < 90) {
      ASSERT_TRUE(index.Apply(w, static_cast<Tier>(tier), Removed(chain[pos])).ok());
      model.erase({w, tier, chain[pos]});
    } else {
      ++queries;
      ASSERT_EQ(index.MatchPrefix(chain), NaiveMatch(model, workers, chain)) << "op " << op;
    }
  }
  EXPECT_GT(queries, 1000);
  // Final full check of every chain, plus the counts.
  std::set<BlockHash> distinct;
  std::map<WorkerId, std::set<BlockHash>> per_worker;
  for (const auto& [w, t, h] : model) {
    distinct.insert(h);
    per_worker[w].insert(h);
  }
  EXPECT_EQ(index.num_blocks(), static_cast<int64_t>(distinct.size()));
  for (WorkerId w : workers) {
    EXPECT_EQ(index.num_worker_blocks(w), static_cast<int64_t>(per_worker[w].size()));
  }
  for (const auto& chain : chains) {
    EXPECT_EQ(index.MatchPrefix(chain), NaiveMatch(model, workers, chain));
  }
}

TEST(KvIndexTest, ConcurrentReadersAndWriter) {
  KvIndex index;
  for (WorkerId w = 0; w < 4; ++w) ASSERT_TRUE(index.RegisterWorker(w).ok());
  std::vector<BlockHash> chain = Chain(0, 16);
  StorePrefix(index, 0, kGpu, chain, 16);  // worker 0 never changes
  std::thread writer([&] {
    for (int round = 0; round < 200; ++round) {
      for (WorkerId w = 1; w < 4; ++w) StorePrefix(index, w, kHost, chain, 16);
      for (WorkerId w = 1; w < 4; ++w) ASSERT_TRUE(index.RemoveWorker(w).ok());
      for (WorkerId w = 1; w < 4; ++w) ASSERT_TRUE(index.RegisterWorker(w).ok());
    }
  });
  for (int i = 0; i < 2000; ++i) {
    std::vector<WorkerMatch> got = index.MatchPrefix(chain);
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(got.front(), Match(0, 16, {16, 0, 0, 0}));
  }
  writer.join();
}

}  // namespace
}  // namespace strata::router
