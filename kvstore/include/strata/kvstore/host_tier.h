#pragma once
// G2: a pool of fixed-size block slots in page-locked host memory.
//
// The pool is one allocation of capacity_bytes / block_bytes slots, made once at Create (by
// `allocate`, e.g. transport-registered memory so UCX peers can read/write slots directly, or
// by default an mmap'ed region locked with mlock; when locking is not permitted the pool works
// unlocked, logs a warning and reports pinned() == false). Eviction by a named policy
// (eviction_policy.h).
//
// Leases: a reader that hands a slot's memory to someone else (a UCX peer reading it, a copy in
// flight) leases the block; a leased block is never evicted or overwritten. A lease expires
// after its timeout even if never released, so a lost peer cannot keep the tier from evicting
// forever (expired leases are reclaimed lazily when room is needed, and counted).
//
// Direct writes: ReserveWrite() hands out a free slot for a block that a peer will write into
// the pool's memory (UCX put) or a local device copy; CommitWrite() verifies the checksum the
// writer sent and publishes the block (CommitWriteUnverified() trusts it, CommitLocalWrite()
// computes it), AbortWrite() gives the slot back. An uncommitted reservation also expires.
//
// Put and Get copy outside the lock (the slot is held by an internal pin meanwhile) and compute
// the checksum on the fly, chunk by chunk, so the copy is one pass over memory and concurrent
// copies proceed in parallel.
//
// Thread-safety: every method is thread-safe.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/kvstore/tier.h"

namespace strata::kvstore {

struct HostTierOptions {
  size_t block_bytes = 0;
  int64_t capacity_bytes = 0;  // rounded down to whole blocks; at least one block
  std::string policy = "lru";
  // Memory for the pool (capacity rounded to blocks); owned by the caller and outliving the
  // tier. Null: the tier mmaps and mlocks its own.
  std::function<absl::StatusOr<void*>(size_t bytes)> allocate;
  absl::Duration lease_timeout = absl::Seconds(30);
  TierKind kind = TierKind::kHost;  // a kvstore daemon's pool reports kRemote
};

class HostTier : public Tier {
 public:
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(const HostTierOptions& options);

  // Whether the pool is page-locked: mlock succeeded, or the caller's `allocate` supplied it
  // (registered memory is the caller's to pin).
  virtual bool pinned() const = 0;
  virtual void* pool_base() const = 0;  // the slot memory (for transport registration)
  virtual size_t pool_bytes() const = 0;

  // A block's bytes held in place until Release (or timeout).
  struct Lease {
    uint64_t id = 0;
    size_t offset = 0;  // of the slot from pool_base()
    uint64_t checksum = 0;
  };
  // NotFound if absent. Counts as a hit/use.
  virtual absl::StatusOr<Lease> Acquire(BlockHash hash) = 0;
  // The same hold without reading: keeps a block resident (and most recently used) for a reader
  // that comes later, e.g. a prefetched run waiting for its import. Counts no hit or miss.
  // NotFound if absent. Released with Release(id).
  virtual absl::StatusOr<uint64_t> Pin(BlockHash hash) = 0;
  virtual void Release(uint64_t lease_id) = 0;  // unknown/expired ids are ignored

  struct Reservation {
    uint64_t id = 0;
    size_t offset = 0;  // of the slot to write, from pool_base()
  };
  // AlreadyExists if the block is present (nothing to write); ResourceExhausted if no slot can
  // be freed.
  virtual absl::StatusOr<Reservation> ReserveWrite(const BlockMeta& meta) = 0;
  // DataLoss (slot freed, counted) if the slot's bytes do not match `checksum`; NotFound for an
  // unknown or expired reservation.
  [[nodiscard]] virtual absl::Status CommitWrite(uint64_t reservation_id, uint64_t checksum) = 0;
  // CommitWrite for a writer that computed `checksum` from the very bytes it wrote into the
  // slot (a kvstore daemon's client): publishes the block without reading the slot back. The
  // checksum is stored all the same, so every reader still verifies. NotFound for an unknown or
  // expired reservation.
  [[nodiscard]] virtual absl::Status CommitWriteUnverified(uint64_t reservation_id,
                                                           uint64_t checksum) = 0;
  // For a writer in this process that filled the slot itself (a device-to-host copy straight
  // into it): publishes the block with the checksum of the slot's bytes (one read of the slot;
  // every reader verifies against it). NotFound for an unknown or expired reservation.
  [[nodiscard]] virtual absl::Status CommitLocalWrite(uint64_t reservation_id) = 0;
  virtual void AbortWrite(uint64_t reservation_id) = 0;

  // Leases and reservations that expired without being released (monotonic).
  virtual int64_t expired_leases() const = 0;

  // Called for each block evicted to make room (not for Erase or a corrupt block), with its
  // bytes and the checksum stored with them, before its slot is reused; TieredStore demotes from
  // here. It runs on the thread that needed room with the tier's lock held: copy what is needed
  // and return, never call into the tier. A hook that reads the bytes verifies them in the same
  // pass (CopyWithBlockChecksum against `checksum`) and returns false when they no longer match:
  // the tier counts a checksum failure, and the hook must not pass the bytes on (a block
  // corrupted in memory is never demoted with a fresh checksum). Null clears it.
  using EvictionHook =
      std::function<bool(const BlockMeta&, std::span<const std::byte>, uint64_t checksum)>;
  virtual void SetEvictionHook(EvictionHook hook) = 0;
};

}  // namespace strata::kvstore
