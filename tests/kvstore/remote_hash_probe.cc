// Prints the block-hash chain of fixed tokens, one hex hash per line, for the test that compares
// hashes computed in separate processes and network namespaces (remote_netns_test.cc).
//   kvstore_remote_hash_probe            (model "strata-netns-probe", 100 tokens, block 16)
#include <cinttypes>
#include <cstdio>
#include <vector>

#include "strata/common/block_hash.h"

int main() {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 100; ++i) tokens.push_back(i * 7919 % 32000);
  const uint64_t seed = strata::BlockHashSeed("strata-netns-probe");
  for (strata::BlockHash h : strata::HashBlockChain(seed, tokens, 16)) {
    std::printf("%016" PRIx64 "\n", h);
  }
  return 0;
}
