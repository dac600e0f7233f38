#pragma once
// A tier that moves blocks straight between long-lived caller memory and its storage, without
// a staging copy: the caller registers the memory once (the pin/map cost is paid there), then
// reads land directly in it, and that moves scattered blocks in one round of requests.
// RemoteTier (remote_tier.h) implements it over UCX; TieredStore uses it, when the remote tier
// offers it, to fetch G4 blocks straight into G2 pool slots and to demote G2 blocks in batches.
//
// A separate pure interface (not part of Tier) so that strata::kvstore can discover it with a
// dynamic_cast without linking the remote tier.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/common/block_hash.h"
#include "strata/kvstore/tier.h"

namespace strata::kvstore {

class DirectTransferTier {
 public:
  virtual ~DirectTransferTier() = default;

  // Registers [addr, addr + bytes) once and returns a handle for UnregisterRegion. The memory
  // must stay valid until then (or the tier's destruction). Regions must not overlap.
  // InvalidArgument for a null or empty range or an overlap; Internal when it cannot be mapped.
  //
  // Reads into registered memory are verified in place: a failed read, or the blocks of a run
  // past the count it returns, may have been overwritten with bytes that are not the block's;
  // only the blocks reported as read are valid.
  [[nodiscard]] virtual absl::StatusOr<uint64_t> RegisterRegion(void* addr, size_t bytes) = 0;
  // No transfer on the region may be in flight. NotFound if unknown.
  virtual absl::Status UnregisterRegion(uint64_t handle) = 0;

  // Reads a chain run into scattered blocks: block i goes to dsts[i] (the tier's block size
  // each), e.g. the G2 pool slots a fetch reserved. Direct when every destination lies in one
  // registered region, else through the tier's staging memory. Returns how many leading blocks
  // were read and verified (it stops at the first miss; a corrupt block is dropped and counted
  // as a checksum failure); an error only when not even the first block could be read.
  // `checksums` (empty, or one entry per hash) receives each read block's verified checksum
  // (BlockChecksum), so a caller that commits the block elsewhere need not hash it again.
  [[nodiscard]] virtual absl::StatusOr<int> GetInto(std::span<const BlockHash> hashes,
                                                    std::span<std::byte* const> dsts,
                                                    std::span<uint64_t> checksums) = 0;

  // Stores blocks from scattered sources (block i's bytes at srcs[i]), e.g. a batch of G2
  // demotions: one ReserveWrite and one transfer per daemon and piece (the commit rides on a
  // later request, see remote_tier.h), where a Put per block pays both per block. Direct when
  // every source lies in one registered region, else through staging. One status per block: OK
  // when stored, already present, or written with its commit owed; else what a Put of that
  // block alone would have returned.
  [[nodiscard]] virtual std::vector<absl::Status> PutBlocks(
      std::span<const BlockMeta> metas, std::span<const std::byte* const> srcs) = 0;
};

}  // namespace strata::kvstore
