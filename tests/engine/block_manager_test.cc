#include "strata/engine/block_manager.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

TEST(BlockManagerTest, AllocatesUntilExhaustedAndReuses) {
  BlockManager bm(4, 16, true);
  std::vector<BlockId> got;
  for (int i = 0; i < 4; ++i) {
    auto b = bm.Allocate();
    ASSERT_TRUE(b.ok());
    got.push_back(*b);
  }
  EXPECT_EQ(bm.num_free_blocks(), 0);
  auto none = bm.Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  bm.Release(got[2]);
  EXPECT_EQ(bm.num_free_blocks(), 1);
  auto again = bm.Allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got[2]);
}

TEST(BlockManagerTest, RefCountsKeepSharedBlocksAlive) {
  BlockManager bm(2, 4, true);
  BlockId b = *bm.Allocate();
  bm.Ref(b);
  EXPECT_EQ(bm.ref_count(b), 2);
  bm.Release(b);
  EXPECT_EQ(bm.num_free_blocks(), 1);
  bm.Release(b);
  EXPECT_EQ(bm.num_free_blocks(), 2);
  EXPECT_DEATH(bm.Release(b), "double release");
}

TEST(BlockManagerTest, CommittedBlocksAreFoundByPrefixAndEvictedLru) {
  BlockManager bm(3, 4, true);
  std::vector<KvCacheEvent> events;
  bm.SetEventListener([&](const KvCacheEvent& e) { events.push_back(e); });
  BlockId a = *bm.Allocate(), b = *bm.Allocate(), c = *bm.Allocate();
  bm.Commit(a, 100);
  bm.Commit(b, 200);
  bm.Commit(c, 300);
  ASSERT_EQ(events.size(), 3u);
  // Release b first, then a, then c: LRU order is b, a, c.
  bm.Release(b);
  bm.Release(a);
  bm.Release(c);
  const BlockHash chain[] = {100, 200, 300};
  EXPECT_EQ(bm.CountCachedPrefix(chain), 3);
  // One fresh allocation evicts the least recently released (b, hash 200).
  BlockId fresh = *bm.Allocate();
  EXPECT_EQ(fresh, b);
  EXPECT_EQ(bm.stats().evictions, 1);
  ASSERT_EQ(events.back().kind, KvCacheEvent::Kind::kRemoved);
  EXPECT_EQ(events.back().hash, 200u);
  // The chain now breaks at 200: only the first block is reusable.
  std::vector<BlockId> prefix = bm.AcquireCachedPrefix(chain);
  ASSERT_EQ(prefix.size(), 1u);
  EXPECT_EQ(prefix[0], a);
  EXPECT_EQ(bm.ref_count(a), 1);
  EXPECT_EQ(bm.stats().prefix_hits, 1);
}

TEST(BlockManagerTest, DuplicateCommitKeepsTheFirstBlock) {
  BlockManager bm(2, 4, true);
  BlockId a = *bm.Allocate(), b = *bm.Allocate();
  bm.Commit(a, 7);
  bm.Commit(b, 7);
  bm.Release(b);  // private block: back to the unused pool
  const BlockHash chain[] = {7};
  auto got = bm.AcquireCachedPrefix(chain);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], a);
}

TEST(BlockManagerTest, DisabledPrefixCachingNeverHits) {
  BlockManager bm(2, 4, false);
  BlockId a = *bm.Allocate();
  bm.Commit(a, 1);
  bm.Release(a);
  const BlockHash chain[] = {1};
  EXPECT_TRUE(bm.AcquireCachedPrefix(chain).empty());
}

TEST(BlockManagerTest, ReleaseAllEvictsTailBlocksFirst) {
  BlockManager bm(2, 4, true);
  BlockId a = *bm.Allocate(), b = *bm.Allocate();
  bm.Commit(a, 1);
  bm.Commit(b, 2);
  std::vector<BlockId> seq = {a, b};
  bm.ReleaseAll(seq);
  EXPECT_EQ(*bm.Allocate(), b);  // the tail goes first; the shared head survives longer
}

}  // namespace
}  // namespace strata
