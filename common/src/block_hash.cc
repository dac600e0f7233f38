#include "strata/common/block_hash.h"

#include <xxhash.h>

#include <cstring>

namespace strata {
namespace {

void PutLe64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
void PutLe32(uint32_t v, unsigned char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
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

BlockHash HashBlock(uint64_t seed, BlockHash parent, std::span<const int32_t> tokens) {
  unsigned char stack_buf[8 + 4 * 64];
  std::vector<unsigned char> heap_buf;
  unsigned char* buf = stack_buf;
  const size_t len = 8 + 4 * tokens.size();
  if (len > sizeof(stack_buf)) {
    heap_buf.resize(len);
    buf = heap_buf.data();
  }
  PutLe64(parent, buf);
  for (size_t i = 0; i < tokens.size(); ++i) {
    PutLe32(static_cast<uint32_t>(tokens[i]), buf + 8 + 4 * i);
  }
  BlockHash h = XXH3_64bits_withSeed(buf, len, seed);
  // 0 is reserved for "no parent"; remap the (astronomically unlikely) collision.
  return h == kRootBlockHash ? 1 : h;
}

std::vector<BlockHash> HashBlockChain(uint64_t seed, std::span<const int32_t> tokens,
                                      int block_size) {
  std::vector<BlockHash> out;
  if (block_size <= 0) return out;
  BlockHash parent = kRootBlockHash;
  for (size_t start = 0; start + block_size <= tokens.size(); start += block_size) {
    parent = HashBlock(seed, parent, tokens.subspan(start, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace strata
