#include "strata/common/block_hash.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

TEST(BlockHashTest, FixedValuesAreStableAcrossBuildsAndHosts) {
  // Golden values: if these change, every stored block and every peer's index is invalidated.
  const uint64_t seed = BlockHashSeed("tiny-llama");
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockHash h1 = HashBlock(seed, kRootBlockHash, tokens);
  const BlockHash h2 = HashBlock(seed, h1, tokens);
  EXPECT_EQ(seed, BlockHashSeed("tiny-llama", ""));
  EXPECT_NE(h1, h2);  // same tokens, different parent
  EXPECT_EQ(h1, HashBlock(seed, kRootBlockHash, tokens));
  // Cross-checked with the Python `xxhash` package:
  //   seed = xxh3_64(b"tiny-llama\xff"); xxh3_64(le64(0) + le32(1,2,3,4), seed)
  EXPECT_EQ(seed, 0x2dab80e490a90162ull);
  EXPECT_EQ(h1, 0x1aeb5f978d31091full) << std::hex << h1;
}

TEST(BlockHashTest, SaltAndModelSeparateNamespaces) {
  std::vector<int32_t> tokens = {7, 8, 9};
  EXPECT_NE(HashBlock(BlockHashSeed("a"), 0, tokens), HashBlock(BlockHashSeed("b"), 0, tokens));
  EXPECT_NE(HashBlock(BlockHashSeed("m", "tenant1"), 0, tokens),
            HashBlock(BlockHashSeed("m", "tenant2"), 0, tokens));
  EXPECT_NE(BlockHashSeed("ab", "c"), BlockHashSeed("a", "bc"));
}

TEST(BlockHashTest, ChainCoversOnlyFullBlocksAndSharesPrefixes) {
  const uint64_t seed = BlockHashSeed("m");
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 99, 9, 10};
  auto ha = HashBlockChain(seed, a, 4);
  auto hb = HashBlockChain(seed, b, 4);
  ASSERT_EQ(ha.size(), 2u);
  ASSERT_EQ(hb.size(), 2u);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_NE(ha[1], hb[1]);
  EXPECT_TRUE(HashBlockChain(seed, a, 0).empty());
  // Long blocks (heap path) hash the same way as a manual chain.
  std::vector<int32_t> long_block(300, 5);
  EXPECT_EQ(HashBlockChain(seed, long_block, 300)[0], HashBlock(seed, 0, long_block));
}

}  // namespace
}  // namespace strata
