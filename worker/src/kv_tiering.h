#pragma once
// A worker's lower KV tiers (kvstore/): offloads blocks the engine's pool evicts (or commits)
// into a TieredStore, and stages every prompt before its request is added to the engine: finds
// the longest cached prefix beyond the engine's own cache across G2/G3/G4, decides per run
// whether fetching beats recomputing (the tiers' measured fetch cost against the engine's
// measured prefill rate), fetches asynchronously into G2 and imports the run into the engine's
// prefix cache right before the request is added. The decisions are the tiering policy's
// (strata/kvstore/tiering_policy.h); this is the glue that carries them out on the engine.
//
// Thread-safety: every public method is thread-safe.
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/common/metrics.h"
#include "strata/engine/engine_loop.h"
#include "strata/kvstore/tiered_store.h"
#include "strata/kvstore/tiering_policy.h"
#include "strata/proto/protocol.h"
#include "strata/worker/worker.h"

namespace strata::kvstore {
class RemoteTier;
}  // namespace strata::kvstore

namespace strata::worker {

struct KvTieringOptions {
  kvstore::OffloadMode offload = kvstore::OffloadMode::kWriteBack;
  kvstore::FetchPolicy fetch;  // fetch or recompute (tiering_policy.h)
};

class KvTiering final : public PromptStager {
 public:
  // Wires `store` to the loop's engine (offload hook, cache mirror, stager). Call before the
  // loop's first request; `loop` and `registry` outlive the tiering.
  static absl::StatusOr<std::unique_ptr<KvTiering>> Create(
      const KvTieringOptions& options, std::unique_ptr<kvstore::TieredStore> store,
      EngineLoop* loop, metrics::Registry* registry);
  // Builds the tiers `tiers` configures (G2 always; G3 with a disk size; G4 with daemons) and
  // Create()s on them. `worker_id` names the transport agent of the remote tier.
  static absl::StatusOr<std::unique_ptr<KvTiering>> Build(const KvTierOptions& tiers,
                                                          const std::string& worker_id,
                                                          EngineLoop* loop,
                                                          metrics::Registry* registry);
  ~KvTiering() override;

  void Stage(std::span<const int32_t> prompt, std::string_view cache_salt,
             std::function<void(EngineTask)> ready) override;

  // Tier events (G2/G3/G4 stores and removals) since the last call, for the router's index.
  std::vector<v1::KvEvent> TakeEvents();
  // Replaces the pending events with one STORED event per block the tiers hold now (after
  // (re-)registering with a router); G4 contents are the kvstore daemons' to report.
  void Resync();
  kvstore::TieredStore& store() { return *store_; }

  // Whether G4's daemons come from the router (KvTierOptions::remote_from_router).
  bool discovers_kvstores() const ABSL_LOCKS_EXCLUDED(discovery_mu_);
  // The kvstore daemons the router lists now (from a registration or heartbeat answer): G4's
  // membership follows them (see kvstore::KvstoreDiscovery), applied on a thread of the
  // tiering's own, so the caller never waits for a daemon. A no-op unless discovers_kvstores().
  void OnKvstoresListed(const std::vector<std::string>& listed) ABSL_LOCKS_EXCLUDED(discovery_mu_);
  // How many membership changes that thread has applied (for tests).
  int64_t membership_changes_applied() const ABSL_LOCKS_EXCLUDED(discovery_mu_);

  struct Stats {
    int64_t staged = 0;               // prompts staged
    int64_t fetch_runs = 0;           // prompts that fetched a run from a lower tier
    int64_t recompute_runs = 0;       // prompts whose lower-tier run was judged cheaper to compute
    int64_t imported_blocks = 0;      // blocks brought into the engine's prefix cache
    int64_t fetch_failed_blocks = 0;  // planned blocks that did not arrive (missed/corrupt)
  };
  Stats stats() const;

 private:
  KvTiering(const KvTieringOptions& options, std::unique_ptr<kvstore::TieredStore> store,
            EngineLoop* loop);
  void Install(metrics::Registry* registry);
  int LeadingInDevice(std::span<const BlockHash> hashes) const;
  EngineTask ImportTask(std::vector<BlockHash> hashes, int device_blocks, int fetched,
                        kvstore::TieredStore::PrefetchPins pins = nullptr);
  // The applier thread: hands each new membership to G4 (SetDaemons) until the destructor.
  void ApplyMembership() ABSL_LOCKS_EXCLUDED(discovery_mu_);
  void OnTierEvent(const kvstore::TierEvent& event);

  const KvTieringOptions options_;
  std::unique_ptr<kvstore::TieredStore> store_;
  EngineLoop* loop_;
  int block_size_ = 0;
  BlockHasher hasher_;  // the engine's (unsalted); Salted() per staged request
  mutable absl::Mutex mu_;
  absl::flat_hash_set<BlockHash> device_ ABSL_GUARDED_BY(mu_);  // mirror of the engine's cache
  std::vector<v1::KvEvent> events_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<metrics::CallbackHandle> callbacks_;
  kvstore::RemoteTier* remote_ = nullptr;  // G4 (owned by store_), if any
  // What decides G4's daemons when they come from the router.
  mutable absl::Mutex discovery_mu_;
  std::optional<kvstore::KvstoreDiscovery> discovery_ ABSL_GUARDED_BY(discovery_mu_);
  std::optional<std::vector<std::string>> pending_ ABSL_GUARDED_BY(discovery_mu_);
  int64_t applied_ ABSL_GUARDED_BY(discovery_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(discovery_mu_) = false;
  std::thread applier_;  // ApplyMembership, when the daemons come from the router
};

}  // namespace strata::worker
