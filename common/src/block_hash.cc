#include "strata/common/block_hash.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "strata/common/file_util.h"

namespace strata {
namespace {

void PutLe64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutLe32(uint32_t v, unsigned char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// SHA-256 of label || 0x00 || counter (le32) || key: the one-way function from which both the
// XXH3 secret and the fingerprint come, under different labels so neither reveals the other.
std::array<unsigned char, 32> LabeledDigest(std::string_view label, uint32_t counter,
                                            std::string_view key) {
  std::array<unsigned char, 32> out{};
  unsigned char ctr[4];
  PutLe32(counter, ctr);
  const unsigned char zero = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned int len = 0;
  const bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, label.data(), label.size()) == 1 &&
                  EVP_DigestUpdate(ctx, &zero, 1) == 1 && EVP_DigestUpdate(ctx, ctr, 4) == 1 &&
                  EVP_DigestUpdate(ctx, key.data(), key.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out.data(), &len) == 1 && len == out.size();
  EVP_MD_CTX_free(ctx);
  if (!ok) {
    // SHA-256 is built into every libcrypto; failing here means the library is broken, and a
    // zero secret would silently unkey the cluster.
    std::fprintf(stderr, "block hash key: SHA-256 failed in libcrypto\n");
    std::abort();
  }
  return out;
}

// Chain hashing shared by the keyed and unkeyed forms: `header` bytes (le64 words) then the
// tokens, hashed by `hash(data, len)`.
template <typename HashFn>
BlockHash HashWithHeader(std::span<const uint64_t> header, std::span<const int32_t> tokens,
                         HashFn hash) {
  unsigned char stack_buf[16 + 4 * 64];
  std::vector<unsigned char> heap_buf;
  unsigned char* buf = stack_buf;
  const size_t head = 8 * header.size();
  const size_t len = head + 4 * tokens.size();
  if (len > sizeof(stack_buf)) {
    heap_buf.resize(len);
    buf = heap_buf.data();
  }
  for (size_t i = 0; i < header.size(); ++i) PutLe64(header[i], buf + 8 * i);
  for (size_t i = 0; i < tokens.size(); ++i) {
    PutLe32(static_cast<uint32_t>(tokens[i]), buf + head + 4 * i);
  }
  const BlockHash h = hash(buf, len);
  // 0 is reserved for "no parent"; remap the (astronomically unlikely) collision.
  return h == kRootBlockHash ? 1 : h;
}

}  // namespace

uint64_t BlockHashSeed(std::string_view model_id, std::string_view salt) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, model_id.data(), model_id.size());
  const unsigned char sep = 0xff;  // keeps ("ab","c") distinct from ("a","bc")
  XXH3_64bits_update(state, &sep, 1);
  XXH3_64bits_update(state, salt.data(), salt.size());
  uint64_t seed = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return seed;
}

uint64_t SaltedBlockHashSeed(uint64_t seed, std::string_view salt) {
  if (salt.empty()) return seed;
  // Seeded by the unsalted seed, so one salt gives every model its own seed; the label and the
  // length prefix keep these inputs apart from any other use of XXH3 here.
  static constexpr std::string_view kLabel = "strata-request-cache-salt";
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset_withSeed(state, seed);
  XXH3_64bits_update(state, kLabel.data(), kLabel.size());
  unsigned char le[8];
  PutLe64(salt.size(), le);
  XXH3_64bits_update(state, le, sizeof(le));
  XXH3_64bits_update(state, salt.data(), salt.size());
  const uint64_t out = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return out;
}

BlockHash HashBlock(uint64_t seed, BlockHash parent, std::span<const int32_t> tokens) {
  const uint64_t header[] = {parent};
  return HashWithHeader(header, tokens, [seed](const unsigned char* data, size_t len) {
    return XXH3_64bits_withSeed(data, len, seed);
  });
}

std::vector<BlockHash> HashBlockChain(uint64_t seed, std::span<const int32_t> tokens,
                                      int block_size) {
  return BlockHasher(seed).Chain(tokens, block_size);
}

absl::StatusOr<std::shared_ptr<const BlockHashKey>> BlockHashKey::FromBytes(std::string_view key) {
  if (key.size() < kMinKeyBytes || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block hash key must be ", kMinKeyBytes, " to ", kMaxKeyBytes,
                     " bytes (e.g. `openssl rand -hex 32`), got ", key.size()));
  }
  std::shared_ptr<BlockHashKey> k(new BlockHashKey());
  for (size_t off = 0, i = 0; off < kSecretBytes; off += 32, ++i) {
    const auto block = LabeledDigest("strata-kv-hash-secret", static_cast<uint32_t>(i), key);
    std::memcpy(k->secret_.data() + off, block.data(), std::min<size_t>(32, kSecretBytes - off));
  }
  const auto fp = LabeledDigest("strata-kv-hash-fingerprint", 0, key);
  k->fingerprint_ =
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(fp.data()), 8));
  return std::shared_ptr<const BlockHashKey>(std::move(k));
}

absl::StatusOr<std::shared_ptr<const BlockHashKey>> BlockHashKey::FromFile(
    const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  // Bounded before reading: a key file is small (trailing whitespace allowed on top).
  if (!ec && size > kMaxKeyBytes + 64) {
    return absl::InvalidArgumentError(absl::StrCat("block hash key file ", path, " is ", size,
                                                   " bytes; a key is at most ", kMaxKeyBytes));
  }
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  std::string_view text = *bytes;
  while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  absl::StatusOr<std::shared_ptr<const BlockHashKey>> key = FromBytes(text);
  if (!key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", key.status().message()));
  }
  return key;
}

BlockHash BlockHasher::Hash(BlockHash parent, std::span<const int32_t> tokens) const {
  if (key_ == nullptr) return HashBlock(seed_, parent, tokens);
  const uint64_t header[] = {seed_, parent};
  const std::span<const unsigned char> secret = key_->secret();
  return HashWithHeader(header, tokens, [secret](const unsigned char* data, size_t len) {
    return XXH3_64bits_withSecret(data, len, secret.data(), secret.size());
  });
}

std::vector<BlockHash> BlockHasher::Chain(std::span<const int32_t> tokens, int block_size) const {
  std::vector<BlockHash> out;
  if (block_size <= 0) return out;
  BlockHash parent = kRootBlockHash;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = Hash(parent, tokens.subspan(start, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace strata
