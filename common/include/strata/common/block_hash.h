#pragma once
// Stable block hashes: the identity of a KV block across processes and machines.
//
// hash(block) = XXH3_64(seed = salt_seed, bytes = le64(parent) || le32(token_0) || ... )
// where salt_seed = XXH3_64(model id / salt string). Byte order is fixed (little-endian)
// so every host computes the same value; never std::hash or absl::Hash here.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace strata {

using BlockHash = uint64_t;

// The parent of the first block of every chain.
inline constexpr BlockHash kRootBlockHash = 0;

// Seed derived from the model id and an optional user salt (tenant isolation).
uint64_t BlockHashSeed(std::string_view model_id, std::string_view salt = {});

BlockHash HashBlock(uint64_t seed, BlockHash parent, std::span<const int32_t> tokens);

// Hashes of every *full* block of `tokens` (a trailing partial block has no hash).
std::vector<BlockHash> HashBlockChain(uint64_t seed, std::span<const int32_t> tokens,
                                      int block_size);

}  // namespace strata
