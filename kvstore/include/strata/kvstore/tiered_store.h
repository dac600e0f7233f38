#pragma once
// TieredStore: G2 (host) + optional G3 (disk) + optional G4 (remote) behind one object that a
// worker's engine offloads evicted blocks into and fetches cached prefixes from.
//
// Data flow:
//   offload  G1 -> G2   Offload(): on eviction from the engine's pool (write-back) or on commit
//                       (write-through); the engine picks the moment, the store copies the bytes.
//   demote   G2 -> G3   when G2 evicts a block that was used at least `disk_admit_min_uses`
//                       times (Offload and NoteUse both count a use; Dynamo's frequency filter).
//   demote   G2 -> G4   when G2 evicts a block and a remote tier is configured, if
//                       `demote_to_remote`: in the same demotion as G3 (no frequency filter),
//                       so a block G3 evicts later is already remote and G3 never forwards.
//   fetch    G3/G4 -> G2   Prefetch(), asynchronous on the store's fetch threads.
//   read     G2 -> G1   ReadHost(), synchronous (a memcpy), on the engine thread.
// Demotions run on a background thread from a bounded queue (full: dropped and counted), so
// Offload never waits for disk or network.
//
// Every store/evict in every tier reaches the listener as a TierEvent (for the router's index).
//
// Thread-safety: every method is thread-safe.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/common/metrics.h"
#include "strata/kvstore/tier.h"
#include "strata/kvstore/tiering_policy.h"

namespace strata::kvstore {

struct TieredStoreOptions {
  OffloadMode offload = OffloadMode::kWriteBack;
  int disk_admit_min_uses = 2;   // G2 -> G3 frequency filter (1: every evicted block)
  bool demote_to_remote = true;  // G2/G3 evictions go to G4 when a remote tier is configured
  int fetch_threads = 2;
  size_t max_pending_demotions = 1024;  // blocks queued for G3/G4 beyond this are dropped
  // Prometheus registry for the per-tier metrics (strata_kvstore_*{tier=...}); nullptr: none.
  metrics::Registry* metrics = nullptr;
  std::string metrics_prefix = "strata_kvstore";
};

class TieredStore {
 public:
  // `host` is required and fixes block_bytes; `disk` and `remote` may be null and must have the
  // same block_bytes. The store takes over the tiers' event listeners.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(const TieredStoreOptions& options,
                                                             std::unique_ptr<Tier> host,
                                                             std::unique_ptr<Tier> disk,
                                                             std::unique_ptr<Tier> remote);
  virtual ~TieredStore() = default;  // drains queued demotions, stops its threads

  virtual OffloadMode offload_mode() const = 0;
  virtual size_t block_bytes() const = 0;
  // nullptr for an unconfigured tier; kDevice is never a TieredStore tier.
  virtual Tier* tier(TierKind kind) = 0;

  // Copies a G1 block into G2 (see the data flow above). Never blocks on disk or network.
  [[nodiscard]] virtual absl::Status Offload(const BlockMeta& meta,
                                             std::span<const std::byte> data) = 0;
  // Offload without the extra host copy: a G2 slot (block_bytes of the host pool) that the
  // caller fills itself, e.g. by a device-to-host copy, then publishes with CommitOffload (the
  // checksum is computed from the slot) or gives back with AbortOffload; an uncommitted slot is
  // reclaimed after the host tier's lease timeout. AlreadyExists when G2 holds the block
  // (nothing to write), ResourceExhausted when no slot can be freed.
  struct OffloadSlot {
    uint64_t id = 0;
    std::span<std::byte> bytes;
  };
  virtual absl::StatusOr<OffloadSlot> ReserveOffload(const BlockMeta& meta) = 0;
  [[nodiscard]] virtual absl::Status CommitOffload(uint64_t id) = 0;
  virtual void AbortOffload(uint64_t id) = 0;
  // The G2 pool that ReserveOffload's slots lie in (e.g. to register it with a device).
  virtual std::span<std::byte> host_pool() const = 0;
  // Records a use of each block (e.g. a G1 prefix-cache hit) for the G3 frequency filter.
  virtual void NoteUse(std::span<const BlockHash> hashes) = 0;

  // For the leading `hashes`, the fastest tier holding each block (G2 before G3 before G4);
  // stops at the first block no tier holds. Presence only: nothing is read.
  virtual std::vector<TierKind> Locate(std::span<const BlockHash> hashes) const = 0;
  // Brings `blocks` (a chain run, in order) into G2 from whichever tier holds each, on the fetch
  // threads; `done(n, pins)` (on a fetch thread) reports that the first n blocks are in G2 now
  // (a miss or checksum failure ends the run early). Those n blocks - fetched or already in G2 -
  // are leased (never evicted) until the last copy of `pins` is destroyed, so fetching the end
  // of a run into a full G2 cannot evict its head before the caller reads it; the leases also
  // expire after the host tier's lease timeout. Measures each tier's TierCost.
  using PrefetchPins = std::shared_ptr<const void>;
  using PrefetchDone = std::function<void(int, PrefetchPins)>;
  virtual void Prefetch(std::vector<BlockMeta> blocks, PrefetchDone done) = 0;
  // Copies a block from G2 into `dst` (checksum verified). NotFound if G2 no longer holds it.
  [[nodiscard]] virtual absl::Status ReadHost(BlockHash hash, std::span<std::byte> dst) = 0;

  virtual TierCost cost(TierKind kind) const = 0;
  // Every tier's store/remove events, from whichever thread made the change (cheap; queue).
  virtual void SetEventListener(TierEventListener listener) = 0;
  // Waits until queued demotions are written (tests, orderly shutdown).
  virtual void Flush() = 0;
};

}  // namespace strata::kvstore
