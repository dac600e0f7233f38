#pragma once
// The tiering policy: every decision about the lower KV tiers that does not need the engine,
// in one place. The worker's glue (worker/src/kv_tiering.*) asks these and carries the answers
// out against the engine; TieredStore (tiered_store.h) applies the ones inside the store.
//
//   when blocks leave the device   OffloadMode: on eviction (write-back) or commit
//                                  (write-through)
//   what goes below G2             TieredStoreOptions::disk_admit_min_uses (the G3 frequency
//                                  filter, counted in a CountMinSketch) and demote_to_remote
//   fetch or recompute             PlanFetch over each tier's measured TierCost
//   which G4 daemons               KvstoreDiscovery, when the router lists them
//
// Thread-safety: the functions are pure; a KvstoreDiscovery is not thread-safe.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "strata/kvstore/tier.h"

namespace strata::kvstore {

class TieredStore;

enum class OffloadMode : uint8_t {
  kWriteBack,     // the engine offloads a block when its pool evicts it
  kWriteThrough,  // the engine offloads a block as soon as it is committed (cached)
};
// "write-back" / "write-through"; InvalidArgument otherwise.
absl::StatusOr<OffloadMode> ParseOffloadMode(std::string_view name);

// Measured cost of reading from a tier, for fetch-vs-recompute decisions: an exponential
// moving average over recent fetches, seeded with conservative defaults until measured.
struct TierCost {
  double bytes_per_second = 0;
  double latency_seconds = 0;  // per fetch call (one run of blocks)
  int64_t samples = 0;         // fetches measured so far
  // Predicted seconds to fetch `blocks` blocks of `block_bytes` in one run.
  double Seconds(int64_t blocks, size_t block_bytes) const {
    return latency_seconds +
           static_cast<double>(blocks * static_cast<int64_t>(block_bytes)) / bytes_per_second;
  }
};

struct FetchPolicy {
  // Prefill rate assumed until the engine has measured one (tokens/s).
  double default_prefill_tokens_per_second = 2000;
  // Fetch only when it is predicted at least this much faster than recomputing (ratio < 1).
  double fetch_margin = 0.9;
};

// One prompt's blocks below the device's cached prefix, as the tiers hold them.
struct FetchCandidate {
  std::span<const TierKind> located;  // the tier of each block after the device prefix
  int block_tokens = 0;               // tokens per block
  size_t block_bytes = 0;
  int64_t host_blocks = 0;               // G2's capacity in blocks
  double prefill_tokens_per_second = 0;  // the engine's measured rate (<= 0: none yet)
};

// How many of the located blocks to fetch (0: recompute them all): the prefix whose predicted
// fetch time (one fetch call per tier involved, `cost` of each) saves the most against
// recomputing it, discounted by the margin, and at most half of G2 (at least 1): fetched blocks
// wait in G2 until the engine imports them, so a longer run could push its own head out before
// the import reads it.
int PlanFetch(const FetchPolicy& policy, const FetchCandidate& candidate,
              const std::function<TierCost(TierKind)>& cost);
// The same with block size, G2's capacity and the costs read off `store`.
int PlanFetch(const FetchPolicy& policy, TieredStore& store, std::span<const TierKind> located,
              int block_tokens, double prefill_tokens_per_second);

// Which kvstore daemons a worker that discovers them from the router places G4 blocks on: the
// ones the router lists now, plus, for `grace`, each one it listed before and lists no more (a
// router that just restarted lists none until the daemons register again; a daemon that
// missed its heartbeats may come back). Sorted by address.
class KvstoreDiscovery {
 public:
  explicit KvstoreDiscovery(absl::Duration grace) : grace_(grace) {}
  // The daemons to use after the router listed `listed` at `now`; nullopt when that is the
  // same set as the previous answer (the first call always answers).
  std::optional<std::vector<std::string>> Update(const std::vector<std::string>& listed,
                                                 absl::Time now);

 private:
  const absl::Duration grace_;
  std::map<std::string, absl::Time> last_listed_;
  std::optional<std::vector<std::string>> current_;
};

}  // namespace strata::kvstore
