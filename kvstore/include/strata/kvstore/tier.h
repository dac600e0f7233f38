#pragma once
// The tiered KV store's contract: one interface for every tier below the engine's device pool.
//
//   G1 kDevice  the engine's block pool (engine/, not a Tier here: the engine owns it)
//   G2 kHost    page-locked host memory of a configured size          (host_tier.h)
//   G3 kDisk    RocksDB on a local path, bounded, checksummed          (disk_tier.h)
//   G4 kRemote  `strata kvstore` daemons reached over gRPC + UCX        (remote_tier.h)
//
// A tier stores whole engine blocks (every layer of `block_size` tokens, the layout the engine
// and the transport use), keyed by the block's chain hash (strata/common/block_hash.h), which is
// stable across processes and machines. Values carry a checksum that is verified on every read:
// a mismatch is a miss (DataLoss, counted, the bad copy dropped), never served.
//
// Thread-safety: every method of a Tier is thread-safe. Methods block for at most one I/O of
// the tier (a memcpy, a RocksDB read/write, a network round trip); asynchrony and overlap are
// the TieredStore's job (tiered_store.h), not the tier's.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "strata/common/block_hash.h"

namespace strata::kvstore {

// Numbered as the router's KvIndex tiers and the proto's KvEvent.tier (0 device .. 3 remote).
enum class TierKind : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTierKinds = 4;
// "device", "host", "disk", "remote" (metric label values).
std::string_view TierName(TierKind kind);

// What a tier knows about a block besides its bytes.
struct BlockMeta {
  BlockHash hash = 0;
  BlockHash parent = kRootBlockHash;  // the chain's previous block (for the router's index)
};

// Published on every store into / removal from a tier, so the router's index stays true.
struct TierEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  Kind kind = Kind::kStored;
  TierKind tier = TierKind::kHost;
  BlockHash hash = 0;
  BlockHash parent = kRootBlockHash;  // kStored only
};
// Called synchronously from whichever thread changed the tier, possibly with the tier's lock
// held: it must be cheap and must not call back into the tier (queue the event).
using TierEventListener = std::function<void(const TierEvent&)>;

// The checksum stored with every value (every tier, on disk and on the wire): a 64-bit
// multiply-accumulate hash over 64-byte stripes with position-dependent keys, a nonlinear
// scramble every 1 KiB and a full-avalanche finalizer (tier.cc states the exact function).
// It is built to run inside a copy loop: a vector (AVX2) path picked at run time and a portable
// path give identical values on every machine. Not cryptographic: it detects corruption
// (flipped bits, torn or misplaced writes), not forgery.
uint64_t BlockChecksum(std::span<const std::byte> data);
// Copies src into dst (same size, not overlapping) and returns BlockChecksum of the copied
// bytes, in one pass over memory: each 64-byte stripe is hashed from the registers it is
// copied through. Readers verify what they deliver, writers checksum what they store, at
// close to memcpy speed. kStreamed writes dst with non-temporal stores (when the CPU has them
// and dst is 32-byte aligned): for memory that will not be read soon, such as a pool slot; it
// saves the read-for-ownership of every destination line and keeps the cache for other work.
enum class CopyDestination : uint8_t { kCached, kStreamed };
uint64_t CopyWithBlockChecksum(std::span<std::byte> dst, std::span<const std::byte> src,
                               CopyDestination where = CopyDestination::kCached);
namespace internal {
// BlockChecksum through the portable path only (tests compare it with the dispatched one).
uint64_t PortableBlockChecksumForTest(std::span<const std::byte> data);
}  // namespace internal

struct TierUsage {
  int64_t blocks = 0;
  int64_t bytes = 0;           // value bytes held (blocks * block_bytes for fixed-size tiers)
  int64_t capacity_bytes = 0;  // configured bound
};

// Monotonic counters (exported as Prometheus counters by TieredStore's metrics).
struct TierStats {
  int64_t hits = 0;                // Get found a verified block
  int64_t misses = 0;              // Get found nothing (or a corrupt block)
  int64_t puts = 0;                // blocks stored (a Put of a present block is not counted)
  int64_t bytes_in = 0;            // value bytes written into the tier
  int64_t bytes_out = 0;           // value bytes read out of the tier
  int64_t evictions = 0;           // blocks dropped to make room
  int64_t checksum_failures = 0;   // reads whose checksum did not match (counted in misses too)
  int64_t rejected = 0;            // Puts refused (no room: everything leased/pinned, or errors)
  int64_t index_resets = 0;        // corrupt indexes moved aside and started empty (disk tier)
  int64_t index_dropped_entries = 0;  // malformed index entries dropped while loading (disk)
};

class Tier {
 public:
  virtual ~Tier() = default;

  virtual TierKind kind() const = 0;
  // Size of every block this tier holds; Put/Get spans must have exactly this size.
  virtual size_t block_bytes() const = 0;

  // Stores a copy of `data` under meta.hash, evicting by the tier's policy to make room.
  // A block already present is left as is (OK) and counts as a use for the eviction policy.
  // ResourceExhausted when no room can be made (every block leased); InvalidArgument for a
  // wrong size; Unavailable / Internal for I/O or peer failures (counted in `rejected`).
  [[nodiscard]] virtual absl::Status Put(const BlockMeta& meta,
                                         std::span<const std::byte> data) = 0;
  // Copies the block into `dst` after verifying its checksum. NotFound on a miss; DataLoss
  // when the stored copy is corrupt (the copy is erased, counted as a checksum failure and a
  // miss, and a kRemoved event is published).
  [[nodiscard]] virtual absl::Status Get(BlockHash hash, std::span<std::byte> dst) = 0;
  // Presence without reading the value (no recency update, no hit/miss counted).
  virtual bool Contains(BlockHash hash) const = 0;
  // Number of leading `hashes` present (stops at the first absent one).
  virtual int CountPrefix(std::span<const BlockHash> hashes) const;
  // Drops the block if present (kRemoved event); OK either way.
  [[nodiscard]] virtual absl::Status Erase(BlockHash hash) = 0;

  // Every block held now (e.g. a disk tier reopened after a restart announces them to the
  // router's index). The default, for tiers that cannot list cheaply (remote), is empty.
  virtual std::vector<BlockMeta> Contents() const { return {}; }

  virtual TierUsage usage() const = 0;
  virtual TierStats stats() const = 0;
  // Set before the tier is shared between threads.
  virtual void SetEventListener(TierEventListener listener) = 0;
};

}  // namespace strata::kvstore
