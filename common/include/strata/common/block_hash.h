#pragma once
// Stable block hashes: the identity of a KV block across processes and machines.
//
// Unkeyed (no cluster key):
//   hash(block) = XXH3_64(seed, bytes = le64(parent) || le32(token_0) || ... )
// Keyed with a cluster's secret key (BlockHashKey):
//   hash(block) = XXH3_64_withSecret(secret(key), bytes = le64(seed) || le64(parent) || ...)
// where seed = XXH3_64(model id || 0xff || engine salt), and a request's cache salt turns it into
// SaltedBlockHashSeed(seed, salt). Byte order is fixed (little-endian) so every host computes
// the same value; never std::hash or absl::Hash here.
//
// Tenant isolation: blocks hashed under different seeds (different salts, or one salted and one
// not) never share a hash, so no prefix cache or KV tier hands one tenant's KV to another. The
// key makes every hash unpredictable to anyone without it, so a client cannot compute offline
// a prompt whose 64-bit block hash collides with another tenant's.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata {

using BlockHash = uint64_t;

// The parent of the first block of every chain.
inline constexpr BlockHash kRootBlockHash = 0;

// Seed derived from the model id and an optional engine-wide salt.
uint64_t BlockHashSeed(std::string_view model_id, std::string_view salt = {});

// The seed of a request with cache salt `salt` (a tenant's): `seed` itself when `salt` is empty,
// else a seed no other salt (and no unsalted request) shares.
uint64_t SaltedBlockHashSeed(uint64_t seed, std::string_view salt);

// The unkeyed block hash (no cluster key).
BlockHash HashBlock(uint64_t seed, BlockHash parent, std::span<const int32_t> tokens);

// Hashes of every *full* block of `tokens` (a trailing partial block has no hash); unkeyed.
std::vector<BlockHash> HashBlockChain(uint64_t seed, std::span<const int32_t> tokens,
                                      int block_size);

// A cluster's secret key for block hashes, read from a file every process of the cluster is
// given. Immutable and thread-safe once built. The key never leaves the process: peers compare
// fingerprints.
class BlockHashKey {
 public:
  static constexpr size_t kMinKeyBytes = 16;
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kSecretBytes = 192;  // XXH3 custom secret (>= its minimum of 136)

  // The key is the bytes given, or the file's bytes less trailing whitespace (so a key written
  // by `openssl rand -hex 32 > file` works); InvalidArgument when shorter than kMinKeyBytes or
  // longer than kMaxKeyBytes, NotFound/PermissionDenied when the file cannot be read.
  static absl::StatusOr<std::shared_ptr<const BlockHashKey>> FromBytes(std::string_view key);
  static absl::StatusOr<std::shared_ptr<const BlockHashKey>> FromFile(const std::string& path);

  // 16 hex digits of a one-way digest of the key (SHA-256 under its own label): equal for equal
  // keys, and safe to log and send; reveals nothing that helps compute hashes.
  const std::string& fingerprint() const { return fingerprint_; }
  std::span<const unsigned char> secret() const { return secret_; }

 private:
  BlockHashKey() = default;
  std::array<unsigned char, kSecretBytes> secret_{};
  std::string fingerprint_;
};

// The fingerprint peers compare: the key's, or "" with no key.
inline std::string KeyFingerprint(const BlockHashKey* key) {
  return key == nullptr ? std::string() : key->fingerprint();
}

// Everything besides the tokens that decides a chain's hashes: the seed (model, engine salt,
// request salt) and the cluster key (null: unkeyed, the same hashes as HashBlock). Cheap to
// copy; thread-safe.
class BlockHasher {
 public:
  BlockHasher() = default;
  explicit BlockHasher(uint64_t seed, std::shared_ptr<const BlockHashKey> key = nullptr)
      : seed_(seed), key_(std::move(key)) {}

  // The same hasher for a request with cache salt `salt` ("" : this one).
  BlockHasher Salted(std::string_view salt) const {
    return BlockHasher(SaltedBlockHashSeed(seed_, salt), key_);
  }

  BlockHash Hash(BlockHash parent, std::span<const int32_t> tokens) const;
  // Hashes of every full block of `tokens` (a trailing partial block has no hash).
  std::vector<BlockHash> Chain(std::span<const int32_t> tokens, int block_size) const;

  uint64_t seed() const { return seed_; }
  const BlockHashKey* key() const { return key_.get(); }
  const std::shared_ptr<const BlockHashKey>& shared_key() const { return key_; }

 private:
  uint64_t seed_ = 0;
  std::shared_ptr<const BlockHashKey> key_;
};

}  // namespace strata
