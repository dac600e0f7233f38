// Eviction policies: the registry, exact victim orders, evictable-skipping, scan resistance.
#include "strata/kvstore/eviction_policy.h"

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::kvstore {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<EvictionPolicy> Make(std::string_view name, int64_t capacity) {
  auto policy = CreateEvictionPolicy(name, capacity);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return std::move(policy).value();
}

bool Any(BlockHash) { return true; }

// Evicts everything, returning the victims in order.
std::vector<BlockHash> Drain(EvictionPolicy& policy) {
  std::vector<BlockHash> order;
  while (auto v = policy.Victim(Any)) {
    order.push_back(*v);
    policy.Erase(*v);
  }
  return order;
}

// A cache of `capacity` keys driven by `policy`, the way a tier drives it. Returns hits.
class SimCache {
 public:
  SimCache(std::string_view name, int64_t capacity)
      : policy_(Make(name, capacity)), capacity_(capacity) {}
  bool Access(BlockHash key) {
    if (present_.contains(key)) {
      policy_->Touch(key);
      return true;
    }
    if (static_cast<int64_t>(present_.size()) >= capacity_) {
      auto v = policy_->Victim(Any);
      EXPECT_TRUE(v.has_value());
      policy_->Erase(*v);
      present_.erase(*v);
    }
    policy_->Insert(key);
    present_.insert(key);
    return false;
  }
  bool Contains(BlockHash key) const { return present_.contains(key); }

 private:
  std::unique_ptr<EvictionPolicy> policy_;
  int64_t capacity_;
  absl::flat_hash_set<BlockHash> present_;
};

TEST(EvictionRegistryTest, KnowsBuiltinsAndRejectsUnknown) {
  EXPECT_THAT(EvictionPolicyNames(),
              ::testing::IsSupersetOf({"adaptive-tinylfu", "arc", "ghost-lru", "lru",
                                       "prefix-tinylfu", "s3-fifo", "w-tinylfu"}));
  // Every built-in reports the name it is registered under.
  for (const std::string& name : EvictionPolicyNames()) {
    if (name.starts_with("test-")) continue;  // registered by RegistersCustomPolicy
    EXPECT_EQ(Make(name, 8)->name(), name);
  }
  auto bad = CreateEvictionPolicy("mru", 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("lru"));
  EXPECT_EQ(CreateEvictionPolicy("lru", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Make("s3-fifo", 4)->name(), "s3-fifo");
}

TEST(EvictionRegistryTest, RegistersCustomPolicy) {
  auto factory = [](int64_t capacity) {
    return std::move(CreateEvictionPolicy("lru", capacity)).value();
  };
  RegisterEvictionPolicy("test-lru-alias", factory);
  EXPECT_FALSE(RegisterEvictionPolicy("test-lru-alias", factory));  // replaced, not new
  EXPECT_THAT(EvictionPolicyNames(), ::testing::Contains("test-lru-alias"));
  EXPECT_EQ(Make("test-lru-alias", 3)->name(), "lru");
}

TEST(LruTest, EvictsLeastRecentlyUsedFirst) {
  auto lru = Make("lru", 8);
  for (BlockHash k : {1, 2, 3, 4}) lru->Insert(k);
  lru->Touch(2);
  lru->Touch(1);
  lru->Insert(3);  // already tracked: a use
  EXPECT_EQ(lru->size(), 4);
  EXPECT_THAT(Drain(*lru), ElementsAre(4, 2, 1, 3));
  EXPECT_EQ(lru->size(), 0);
}

TEST(LruTest, SkipsUnevictableWithoutLosingOrder) {
  auto lru = Make("lru", 8);
  for (BlockHash k : {1, 2, 3}) lru->Insert(k);
  auto not1 = [](BlockHash k) { return k != 1; };
  EXPECT_EQ(lru->Victim(not1), 2u);
  EXPECT_EQ(lru->Victim(not1), 2u);  // Victim does not remove
  EXPECT_EQ(lru->Victim([](BlockHash) { return false; }), std::nullopt);
  lru->Erase(2);
  lru->Erase(42);                               // untracked: no-op
  EXPECT_THAT(Drain(*lru), ElementsAre(1, 3));  // 1 kept its place at the tail
}

TEST(S3FifoTest, ExactVictimOrderWithPromotionAndGhost) {
  auto s3 = Make("s3-fifo", 10);                // small target 1 block
  for (BlockHash k : {1, 2, 3}) s3->Insert(k);  // small: 3 2 1 (1 oldest)
  s3->Touch(2);
  EXPECT_EQ(s3->Victim(Any), 1u);  // unused, oldest in small
  s3->Erase(1);                    // -> ghost
  EXPECT_EQ(s3->Victim(Any), 3u);  // 2 was used: moved to main; 3 is next in small
  s3->Erase(3);                    // -> ghost
  s3->Insert(1);                   // ghost hit: straight to main (main: 1 2)
  s3->Insert(4);                   // small: 4
  // small holds its share (1) -> small first: 4 is unused.
  EXPECT_EQ(s3->Victim(Any), 4u);
  s3->Erase(4);
  // small empty -> main, oldest first: 2 then 1.
  EXPECT_THAT(Drain(*s3), ElementsAre(2, 1));
}

TEST(S3FifoTest, MainReinsertsUsedKeysWithDecrement) {
  auto s3 = Make("s3-fifo", 10);
  for (BlockHash k : {1, 2, 3}) {
    s3->Insert(k);
    s3->Touch(k);
  }
  // Each was used in small, so all move to main (count reset); then main's oldest goes.
  EXPECT_EQ(s3->Victim(Any), 1u);
  s3->Touch(1);                    // used in main: one more round
  EXPECT_EQ(s3->Victim(Any), 2u);  // 1 reinserted at main's head with its count decremented
  s3->Erase(2);
  EXPECT_THAT(Drain(*s3), ElementsAre(3, 1));
}

TEST(S3FifoTest, SkipsUnevictableWithoutLosingOrder) {
  auto s3 = Make("s3-fifo", 10);
  for (BlockHash k : {1, 2, 3}) s3->Insert(k);
  auto not1 = [](BlockHash k) { return k != 1; };
  EXPECT_EQ(s3->Victim(not1), 2u);
  s3->Erase(2);
  EXPECT_EQ(s3->Victim([](BlockHash) { return false; }), std::nullopt);
  EXPECT_THAT(Drain(*s3), ElementsAre(1, 3));
}

TEST(S3FifoTest, GhostIsOnlyForEvictedKeys) {
  auto s3 = Make("s3-fifo", 10);
  for (BlockHash k : {1, 2}) s3->Insert(k);
  s3->Erase(1);   // an explicit erase, not a victim: no ghost entry
  s3->Insert(1);  // back into small as a new key
  s3->Insert(3);
  EXPECT_THAT(Drain(*s3), ElementsAre(2, 1, 3));
}

// A hot set used over and over, then a one-pass scan of cold keys twice the cache size:
// S3-FIFO keeps the hot set, LRU loses all of it.
TEST(S3FifoTest, ScanDoesNotFlushHotSet) {
  constexpr int kCapacity = 100;
  constexpr int kHot = 20;
  SimCache s3("s3-fifo", kCapacity);
  SimCache arc("arc", kCapacity);
  SimCache lru("lru", kCapacity);
  for (int round = 0; round < 3; ++round) {
    for (BlockHash k = 1; k <= kHot; ++k) {
      s3.Access(k);
      arc.Access(k);
      lru.Access(k);
    }
  }
  for (BlockHash k = 1000; k < 1000 + 2 * kCapacity; ++k) {
    s3.Access(k);
    arc.Access(k);
    lru.Access(k);
  }
  int s3_hot = 0, arc_hot = 0, lru_hot = 0;
  for (BlockHash k = 1; k <= kHot; ++k) {
    s3_hot += s3.Contains(k);
    arc_hot += arc.Contains(k);
    lru_hot += lru.Contains(k);
  }
  EXPECT_EQ(s3_hot, kHot);
  EXPECT_EQ(arc_hot, kHot);
  EXPECT_EQ(lru_hot, 0);
}

TEST(ArcTest, ExactVictimOrderWithGhostsAdaptingTarget) {
  auto arc = Make("arc", 4);
  for (BlockHash k : {1, 2, 3}) arc->Insert(k);  // T1: 3 2 1
  arc->Touch(2);                                 // T2: 2
  EXPECT_EQ(arc->Victim(Any), 1u);               // T1 above its target (0): T1's LRU
  arc->Erase(1);                                 // -> B1
  arc->Insert(1);                                // B1 hit: target 1, 1 -> T2 (T2: 1 2)
  EXPECT_EQ(arc->Victim(Any), 2u);               // T1 (3) is at its target: T2's LRU
  arc->Erase(2);                                 // -> B2
  arc->Insert(2);                                // B2 hit: target 0, 2 -> T2 (T2: 2 1)
  EXPECT_EQ(arc->Victim(Any), 3u);
  arc->Erase(3);
  EXPECT_THAT(Drain(*arc), ElementsAre(1, 2));
}

TEST(ArcTest, SkipsUnevictableAndFallsBackToOtherList) {
  auto arc = Make("arc", 8);
  for (BlockHash k : {1, 2, 3}) arc->Insert(k);
  arc->Touch(3);  // T1: 2 1, T2: 3
  auto only3 = [](BlockHash k) { return k == 3; };
  EXPECT_EQ(arc->Victim(only3), 3u);  // T1 has nothing evictable: T2
  auto not1 = [](BlockHash k) { return k != 1; };
  EXPECT_EQ(arc->Victim(not1), 2u);
  arc->Erase(2);
  arc->Erase(42);  // untracked: no-op
  EXPECT_EQ(arc->size(), 2);
  EXPECT_THAT(Drain(*arc), ElementsAre(1, 3));
}

}  // namespace
}  // namespace strata::kvstore

namespace strata::kvstore {
namespace {

// W-TinyLFU at capacity 100: a window of 1 block, main of 99.
TEST(TinyLfuTest, OneHitKeysDoNotDisplaceReusedOnes) {
  auto p = Make("w-tinylfu", 100);
  EXPECT_EQ(p->name(), "w-tinylfu");
  for (BlockHash k = 0; k < 100; ++k) p->Insert(k);  // 99 spill to main, key 99 in window
  for (BlockHash k = 0; k < 50; ++k) p->Touch(k);    // keys 0..49 are used twice
  // A new key would need room: the window's key 99 (seen once) duels probation's oldest,
  // key 50 (seen once); a tie keeps main as it is, so the candidate itself goes.
  EXPECT_EQ(p->Victim(Any), 99u);
  p->Erase(99);
  // A scan of 1000 one-hit keys only churns the window: every reused key stays.
  for (BlockHash k = 1000; k < 2000; ++k) {
    p->Insert(k);
    auto v = p->Victim(Any);
    ASSERT_TRUE(v.has_value());
    EXPECT_GE(*v, 50u) << "a reused key was evicted";
    p->Erase(*v);
  }
  EXPECT_EQ(p->size(), 99);
}

TEST(TinyLfuTest, PopularCandidateEntersMainAndSkipsUnevictable) {
  auto p = Make("w-tinylfu", 10);  // window 1, main 9
  for (BlockHash k = 0; k < 10; ++k) p->Insert(k);  // 0..8 in probation, 9 in window
  for (int i = 0; i < 3; ++i) p->Touch(9);          // window key now more popular
  // The candidate 9 beats probation's oldest (0); 0 is unevictable, so 1 goes instead.
  EXPECT_EQ(p->Victim([](BlockHash k) { return k != 0; }), 1u);
  p->Erase(1);
  EXPECT_EQ(p->Victim(Any), 0u);  // 0 kept its place at probation's tail
  EXPECT_EQ(p->Victim([](BlockHash) { return false; }), std::nullopt);
}

TEST(PrefixTinyLfuTest, EvictsOrphanedDescendantsFirst) {
  auto p = Make("prefix-tinylfu", 100);
  EXPECT_EQ(p->name(), "prefix-tinylfu");
  p->Insert(1);
  p->InsertChild(2, 1);
  p->InsertChild(3, 2);
  p->Insert(10);
  for (int i = 0; i < 5; ++i) p->Touch(10);
  p->Erase(1);  // 2 can no longer be part of a cached prefix
  EXPECT_EQ(p->Victim(Any), 2u);
  p->Erase(2);  // which orphans 3
  EXPECT_EQ(p->Victim(Any), 3u);
  p->Erase(3);
  p->InsertChild(20, 99);  // parent 99 is not cached: orphan on arrival
  EXPECT_EQ(p->Victim([](BlockHash k) { return k != 20; }), 10u);
  EXPECT_EQ(p->Victim(Any), 20u);
  p->Touch(20);  // used again (its prefix is back): no longer an orphan, now in probation
  // The ordinary duel: window key 10 (seen 6 times) beats probation's 20 (seen twice).
  EXPECT_EQ(p->Victim(Any), 20u);
  p->Erase(20);
  EXPECT_EQ(p->size(), 1);
}

TEST(PrefixTinyLfuTest, DefaultInsertChildIgnoresParent) {
  auto p = Make("lru", 3);
  p->Insert(1);
  p->InsertChild(2, 1);
  p->Erase(1);
  EXPECT_EQ(p->Victim(Any), 2u);
}

}  // namespace
}  // namespace strata::kvstore

namespace strata::kvstore {
namespace {

// ghost-lru at capacity 4: a window of 1 block; a key enters main only on its second visit.
TEST(GhostLruTest, AdmitsOnlyKeysSeenBeforeAndSurvivesAScan) {
  auto p = Make("ghost-lru", 4);
  EXPECT_EQ(p->name(), "ghost-lru");
  for (BlockHash k : {1, 2, 3, 4}) p->Insert(k);  // window (newest first): 4 3 2 1, main empty
  std::vector<BlockHash> victims;
  auto evict_then_insert = [&](BlockHash next) {
    auto v = p->Victim(Any);
    ASSERT_TRUE(v.has_value());
    victims.push_back(*v);
    p->Erase(*v);
    p->Insert(next);
  };
  evict_then_insert(1);  // 1 evicted (remembered in the ghost), then comes back
  for (BlockHash k : {5, 6, 7}) evict_then_insert(k);
  // 1 reached the window's end again: it is in the ghost, so it moves to main and the next
  // window key (5) goes instead.
  evict_then_insert(8);
  EXPECT_THAT(victims, ElementsAre(1, 2, 3, 4, 5));
  // A scan of keys seen once only churns the window: 1 stays.
  for (BlockHash k = 100; k < 300; ++k) {
    auto v = p->Victim(Any);
    ASSERT_TRUE(v.has_value());
    EXPECT_NE(*v, 1u);
    p->Erase(*v);
    p->Insert(k);
  }
  // Unevictable keys are skipped; with nothing evictable there is no victim.
  EXPECT_EQ(p->Victim([](BlockHash k) { return k == 1; }), 1u);
  EXPECT_EQ(p->Victim([](BlockHash) { return false; }), std::nullopt);
  EXPECT_EQ(p->size(), 4);
}

// Every key is used exactly twice, 30 accesses apart: LRU hits every second use, while an
// admission filter with a tiny window evicts each key before its reuse. ghost-lru must climb
// to a large window and end up as good as LRU. (adaptive-tinylfu does not: a slightly larger
// window loses some of its few hits here, so its climber settles at a small window.)
TEST(AdaptiveWindowTest, ClimbsToLruWhenRecencyIsWhatPays) {
  constexpr int kCapacity = 100;
  constexpr int kAccesses = 120000;
  constexpr int kTail = 20000;  // hits counted over the last accesses only
  auto run = [&](std::string_view name) {
    SimCache cache(name, kCapacity);
    int64_t hits = 0, step = 0;
    for (BlockHash k = 1; step < kAccesses; ++k) {
      for (BlockHash key : {k, k > 30 ? k - 30 : 0}) {
        if (key == 0) continue;
        const bool hit = cache.Access(key);
        if (step++ >= kAccesses - kTail) hits += hit;
      }
    }
    return hits;
  };
  const int64_t lru = run("lru");
  EXPECT_GT(lru, kTail * 45 / 100);  // about half the accesses are second uses
  EXPECT_GE(run("ghost-lru"), lru * 9 / 10);
  EXPECT_LT(run("w-tinylfu"), lru / 2) << "the workload no longer separates the policies";
}

}  // namespace
}  // namespace strata::kvstore
