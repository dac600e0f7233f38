#include "strata/common/block_hash.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

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

TEST(BlockHashTest, SaltedAndKeyedFixedValues) {
  // Golden values of the salted seed and the keyed hash, cross-checked by calling libxxhash
  // from Python (ctypes) on bytes laid out by hand, with the secret from hashlib:
  //   salted = XXH3_64bits_withSeed(b"strata-request-cache-salt" + le64(8) + b"tenant-a", seed)
  //   keyed  = XXH3_64bits_withSecret(le64(seed) + le64(0) + le32(1, 2, 3, 4), secret)
  const uint64_t seed = BlockHashSeed("tiny-llama");
  EXPECT_EQ(SaltedBlockHashSeed(seed, "tenant-a"), 0x99fc06f8ab9f7e35ull);
  auto key = BlockHashKey::FromBytes("0123456789abcdef0123456789abcdef");
  ASSERT_TRUE(key.ok());
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(BlockHasher(seed, *key).Hash(kRootBlockHash, tokens), 0x7c95dec8e72c3c72ull);
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

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

std::shared_ptr<const BlockHashKey> Key(std::string_view bytes) {
  auto key = BlockHashKey::FromBytes(bytes);
  EXPECT_TRUE(key.ok()) << key.status();
  return key.ok() ? *key : nullptr;
}

// No two chains share a block hash.
void ExpectDisjoint(const std::vector<BlockHash>& a, const std::vector<BlockHash>& b) {
  std::set<BlockHash> seen(a.begin(), a.end());
  for (BlockHash h : b) EXPECT_FALSE(seen.contains(h)) << std::hex << h;
}

TEST(BlockHashTest, RequestSaltSeparatesChainsAndEmptySaltIsUnsalted) {
  const uint64_t seed = BlockHashSeed("m");
  EXPECT_EQ(SaltedBlockHashSeed(seed, ""), seed);
  EXPECT_EQ(SaltedBlockHashSeed(seed, "tenant-a"), SaltedBlockHashSeed(seed, "tenant-a"));
  EXPECT_NE(SaltedBlockHashSeed(seed, "tenant-a"), SaltedBlockHashSeed(seed, "tenant-b"));
  EXPECT_NE(SaltedBlockHashSeed(seed, "tenant-a"), seed);
  EXPECT_NE(SaltedBlockHashSeed(seed, "x"), SaltedBlockHashSeed(BlockHashSeed("n"), "x"));
  // Block sizes on both sides of XXH3's 240-byte threshold (16 and 64 tokens).
  for (int bs : {16, 64}) {
    const std::vector<int32_t> prompt = Tokens(4 * bs, 3);
    const BlockHasher plain(seed);
    const auto unsalted = plain.Chain(prompt, bs);
    const auto a = plain.Salted("tenant-a").Chain(prompt, bs);
    const auto b = plain.Salted("tenant-b").Chain(prompt, bs);
    ASSERT_EQ(a.size(), 4u);
    EXPECT_EQ(unsalted, HashBlockChain(seed, prompt, bs));  // unkeyed, unsalted: as before
    EXPECT_EQ(plain.Salted("").Chain(prompt, bs), unsalted);
    EXPECT_EQ(plain.Salted("tenant-a").Chain(prompt, bs), a);
    ExpectDisjoint(a, b);
    ExpectDisjoint(a, unsalted);
    ExpectDisjoint(b, unsalted);
  }
}

TEST(BlockHashTest, ClusterKeyChangesEveryHashAndEqualKeysAgree) {
  const uint64_t seed = BlockHashSeed("m");
  auto k1 = Key("0123456789abcdef0123456789abcdef");
  auto k1_again = Key("0123456789abcdef0123456789abcdef");
  auto k2 = Key("0123456789abcdef0123456789abcdeF");
  ASSERT_TRUE(k1 && k1_again && k2);
  EXPECT_EQ(k1->fingerprint(), k1_again->fingerprint());
  EXPECT_NE(k1->fingerprint(), k2->fingerprint());
  EXPECT_EQ(k1->fingerprint().size(), 16u);
  // Cross-checked with Python's hashlib (peers and tools may compute it themselves):
  //   sha256(b"strata-kv-hash-fingerprint" + b"\0" + le32(0) + key).hexdigest()[:16]
  EXPECT_EQ(k1->fingerprint(), "36576631e25d8530");
  // The XXH3 secret: SHA-256(b"strata-kv-hash-secret" + b"\0" + le32(i) + key), i = 0..5.
  auto hex = [](std::span<const unsigned char> bytes) {
    std::string out;
    for (unsigned char c : bytes) out += absl::StrFormat("%02x", c);
    return out;
  };
  ASSERT_EQ(k1->secret().size(), 192u);
  EXPECT_EQ(hex(k1->secret().first(8)), "c6372a9df630e371");
  EXPECT_EQ(hex(k1->secret().last(8)), "be3d74696668e930");
  EXPECT_EQ(k1->fingerprint().find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(KeyFingerprint(nullptr), "");
  for (int bs : {16, 64}) {
    const std::vector<int32_t> prompt = Tokens(4 * bs, 11);
    const auto unkeyed = BlockHasher(seed).Chain(prompt, bs);
    const auto keyed = BlockHasher(seed, k1).Chain(prompt, bs);
    ASSERT_EQ(keyed.size(), 4u);
    EXPECT_EQ(BlockHasher(seed, k1_again).Chain(prompt, bs), keyed);
    ExpectDisjoint(keyed, unkeyed);
    ExpectDisjoint(keyed, BlockHasher(seed, k2).Chain(prompt, bs));
    // Under a key, the model seed and the request salt still separate chains.
    ExpectDisjoint(keyed, BlockHasher(BlockHashSeed("n"), k1).Chain(prompt, bs));
    const auto salted = BlockHasher(seed, k1).Salted("tenant-a").Chain(prompt, bs);
    ExpectDisjoint(keyed, salted);
    EXPECT_EQ(BlockHasher(seed, k1_again).Salted("tenant-a").Chain(prompt, bs), salted);
    // A keyed chain still shares the prefix of prompts that share their first blocks.
    std::vector<int32_t> other = prompt;
    other.back() += 1;
    const auto other_keyed = BlockHasher(seed, k1).Chain(other, bs);
    EXPECT_EQ(std::vector<BlockHash>(other_keyed.begin(), other_keyed.end() - 1),
              std::vector<BlockHash>(keyed.begin(), keyed.end() - 1));
    EXPECT_NE(other_keyed.back(), keyed.back());
  }
}

TEST(BlockHashTest, KeyBytesAreBounded) {
  EXPECT_EQ(BlockHashKey::FromBytes("short").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BlockHashKey::FromBytes(std::string(BlockHashKey::kMinKeyBytes, 'k')).ok());
  EXPECT_TRUE(BlockHashKey::FromBytes(std::string(BlockHashKey::kMaxKeyBytes, 'k')).ok());
  EXPECT_EQ(
      BlockHashKey::FromBytes(std::string(BlockHashKey::kMaxKeyBytes + 1, 'k')).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(BlockHashTest, KeyFileDropsTrailingWhitespace) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("block_hash_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const std::string hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  auto from_file = BlockHashKey::FromFile(write("key", hex + "\n"));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ((*from_file)->fingerprint(), Key(hex)->fingerprint());
  auto short_file = BlockHashKey::FromFile(write("short", "abc\n"));
  EXPECT_EQ(short_file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_file.status().message().find((dir / "short").string()), std::string::npos);
  auto huge = BlockHashKey::FromFile(write("huge", std::string(1 << 20, 'k')));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockHashKey::FromFile((dir / "missing").string()).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
