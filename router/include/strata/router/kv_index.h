#pragma once
// The router's global KV index: which (worker, tier) holds which KV block, by chained hash.
//
// Workers' block managers (and tier offloaders) publish KvEvents: "block `hash` (child of
// `parent_hash`) is now stored in / removed from tier T of worker W". The index folds them into
// hash -> {(worker, tier mask)} and answers the routing question: for a request whose prompt
// hashes to the chain c[0..n), how long a prefix of c does every worker hold?
//
// Design notes
// - Block hashes are chained (hash(i) covers hash(i-1)), so a hash names its whole prefix. The
//   index therefore needs no tree: it is a flat map keyed by hash, and a query walks its own chain.
//   An event whose parent was never indexed ("orphan": lost or reordered events) is indexed like
//   any other and counted in Stats; it only becomes matchable once its ancestors are held too,
//   because matches are contiguous from block 0.
// - Each block keeps a short list of holders (worker slot + bitmask of tiers). MatchPrefix walks
//   the chain once and, per step, extends only the workers that matched every earlier block; it
//   stops at the first block no surviving worker holds. Cost: O(sum of holders of the matched
//   blocks), independent of the index size.
// - Each registered worker keeps the set of hashes it holds, so RemoveWorker is O(its blocks).
// - Events are idempotent: storing a held block or removing an absent one changes nothing (and
//   is counted), so replayed or duplicated event streams are harmless.
//
// Thread-safety: every method is safe to call concurrently. One absl::Mutex guards the state;
// writers (Apply, ApplyBatch, RegisterWorker, RemoveWorker) take it exclusively, readers
// (MatchPrefix, counts, stats) share it, so concurrent queries do not serialize. The intended
// use is one event-ingest thread plus many routing threads; ApplyBatch amortizes the lock.
#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/block_hash.h"

namespace strata::router {

using WorkerId = uint32_t;

// Where a worker holds a block, fastest first.
enum class Tier : uint8_t { kGpu = 0, kHostPinned = 1, kDisk = 2, kRemote = 3 };
inline constexpr int kNumTiers = 4;

struct KvEvent {
  // kCleared: the worker no longer holds any block in the tier (a resync follows); its hash and
  // parent are ignored.
  enum class Kind : uint8_t { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  BlockHash hash = 0;
  BlockHash parent_hash = kRootBlockHash;  // kRootBlockHash for the first block of a chain
};

// One worker's overlap with a queried chain. Only workers matching >= 1 block are reported.
struct WorkerMatch {
  WorkerId worker = 0;
  // Longest prefix of the chain whose every block this worker holds in some tier.
  int32_t blocks = 0;
  // Longest prefix held entirely in tier t (<= blocks), indexed by static_cast<int>(Tier).
  std::array<int32_t, kNumTiers> tier_blocks{};

  friend bool operator==(const WorkerMatch&, const WorkerMatch&) = default;
};

struct KvIndexStats {
  int64_t events_applied = 0;    // events that changed the index
  int64_t duplicate_stores = 0;  // kStored for a (worker, tier) that already held the block
  int64_t unknown_removes = 0;   // kRemoved for a (worker, tier) that did not hold the block
  int64_t orphan_stores = 0;     // kStored whose non-root parent was not indexed at all
  int64_t provisional_stores = 0;   // blocks NoteRouted added ahead of the worker's events
  int64_t provisional_expired = 0;  // of those, dropped unconfirmed at their deadline
};

class KvIndex {
 public:
  KvIndex() = default;
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;

  // kAlreadyExists if `worker` is registered.
  [[nodiscard]] absl::Status RegisterWorker(WorkerId worker) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops every block the worker holds and unregisters it. O(its blocks). kNotFound if unknown.
  [[nodiscard]] absl::Status RemoveWorker(WorkerId worker) ABSL_LOCKS_EXCLUDED(mu_);

  // Folds one event in. kNotFound for an unregistered worker, kInvalidArgument for a bad tier
  // or kind; duplicates and removals of unknown blocks are OK (and counted).
  [[nodiscard]] absl::Status Apply(WorkerId worker, Tier tier, const KvEvent& event)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Apply() for a run of events from one (worker, tier) under a single lock acquisition.
  // Stops at and returns the first error; earlier events stay applied.
  [[nodiscard]] absl::Status ApplyBatch(WorkerId worker, Tier tier, std::span<const KvEvent> events)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The router placed a request whose prompt hashes to `chain` on `worker`: the blocks it does
  // not hold yet are indexed as held in kGpu at once, provisionally, so requests routed before
  // the worker's own events arrive (a burst sharing a prefix) find them there. The worker's
  // event for such a block (stored in any tier, or removed) replaces the provisional entry;
  // one still unconfirmed at now_s + ttl_s is dropped (a request that failed, or blocks evicted
  // before they were reported). kNotFound for an unregistered worker.
  [[nodiscard]] absl::Status NoteRouted(WorkerId worker, std::span<const BlockHash> chain,
                                        double now_s, double ttl_s) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the provisional entries whose deadline is before now_s.
  void ExpireProvisional(double now_s) ABSL_LOCKS_EXCLUDED(mu_);

  // Per worker holding chain[0], the longest prefix of `chain` it holds (overall and per tier),
  // sorted by worker id. Workers matching nothing are omitted.
  std::vector<WorkerMatch> MatchPrefix(std::span<const BlockHash> chain) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Distinct blocks held by at least one worker.
  int64_t num_blocks() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks held by `worker` in any tier (0 if unknown), and in one tier.
  int64_t num_worker_blocks(WorkerId worker) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_worker_blocks(WorkerId worker, Tier tier) const ABSL_LOCKS_EXCLUDED(mu_);
  int num_workers() const ABSL_LOCKS_EXCLUDED(mu_);
  KvIndexStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A dense per-worker index; slots of removed workers are reused.
  using Slot = uint32_t;
  struct Holder {
    Slot slot;
    uint8_t tiers;  // bit t set: held in Tier(t)
  };
  struct WorkerState {
    WorkerId id = 0;
    absl::flat_hash_set<BlockHash> blocks;  // held in at least one tier
    std::array<int64_t, kNumTiers> tier_blocks{};
    absl::flat_hash_set<BlockHash> provisional;  // held in kGpu by NoteRouted, unconfirmed
  };
  struct Expiry {
    double deadline_s;
    WorkerId worker;
    BlockHash hash;
  };
  using Holders = absl::InlinedVector<Holder, 2>;

  absl::Status ApplyLocked(Slot slot, Tier tier, const KvEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StoreLocked(Slot slot, int tier, const KvEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(Slot slot, int tier, BlockHash hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearTierLocked(Slot slot, int tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the provisional kGpu entry of (slot, hash), if there is one.
  void DropProvisionalLocked(Slot slot, BlockHash hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(double now_s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slot of a registered worker, or kNotFound.
  absl::Status FindSlot(WorkerId worker, Slot* slot) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<BlockHash, Holders> blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<WorkerId, Slot> slot_of_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerState> workers_ ABSL_GUARDED_BY(mu_);  // by slot
  std::vector<Slot> free_slots_ ABSL_GUARDED_BY(mu_);
  KvIndexStats stats_ ABSL_GUARDED_BY(mu_);
  std::deque<Expiry> expiries_ ABSL_GUARDED_BY(mu_);  // deadlines in the order they were set
};

}  // namespace strata::router
