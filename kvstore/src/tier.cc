#include "strata/kvstore/tier.h"

#include <xxhash.h>

namespace strata::kvstore {

std::string_view TierName(TierKind kind) {
  switch (kind) {
    case TierKind::kDevice:
      return "device";
    case TierKind::kHost:
      return "host";
    case TierKind::kDisk:
      return "disk";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

uint64_t BlockChecksum(std::span<const std::byte> data) {
  // A fixed seed distinct from the block-hash seeds, so a checksum never equals a block hash
  // by construction.
  constexpr uint64_t kSeed = 0x73747261'74616b76ULL;  // "stratakv"
  return XXH3_64bits_withSeed(data.data(), data.size(), kSeed);
}

int Tier::CountPrefix(std::span<const BlockHash> hashes) const {
  int n = 0;
  for (BlockHash h : hashes) {
    if (!Contains(h)) break;
    ++n;
  }
  return n;
}

}  // namespace strata::kvstore
