#pragma once
// The router's live view of the workers: who is registered, in which role, how loaded (from
// heartbeats), and what their KV caches hold (the global KV index, fed by the heartbeats' KV
// events). Workers that miss heartbeats for `dead_after` are dropped (and their index entries
// pruned); a worker that fails a request is marked down at once.
//
// Model pools: a router serving one model (ServeModels never called, or called with one name)
// keeps one pool, and every worker joins it whatever name it registers with. Serving several
// models, each worker joins the pool of the model it names at registration (WorkerInfo.model),
// and each pool has its own model identity, block size, KV layout, KV index and profiles:
// placement and prefix matching of a request see only its model's pool. kvstore daemons hold
// blocks for the workers: one joins every pool whose model identity it matches (all of them
// when it names none); its blocks go into each of those pools' indices.
//
// Thread-safety: every method is thread-safe.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/common/block_hash.h"
#include "strata/proto/protocol.h"
#include "strata/router/kv_index.h"
#include "strata/router/latency_model.h"
#include "strata/router/worker_view.h"

namespace strata::router {

// The placement view of a registration and a heartbeat's load: the protobuf edge of placement.
WorkerRole RoleFromProto(v1::Role role);
LoadReport LoadFromProto(const v1::WorkerLoad& load);

class WorkerPool {
 public:
  // `kv_hash_key`: the cluster's block hash key (null: unkeyed). Workers must hash with the same
  // key: one whose key fingerprint differs (or that has a key when the router has none, or the
  // reverse) is refused at registration.
  explicit WorkerPool(absl::Duration dead_after = absl::Seconds(3),
                      std::shared_ptr<const BlockHashKey> kv_hash_key = nullptr);

  // The served model names, each a pool of its own (see above). Call before workers register;
  // InvalidArgument for an empty or repeated name. With one name (or never called) the pool
  // takes every worker.
  absl::Status ServeModels(const std::vector<std::string>& names);
  // Adds or replaces the worker. The first worker of a pool fixes its model identity; a worker
  // of another identity, or naming a model not served (several models), or keying block hashes
  // with another key, is rejected with FailedPrecondition. With RequireProfiles, so is a worker
  // (not a kvstore daemon) that no profile of its model describes (ChooseProfile by its model
  // and device); the chosen one rides in its WorkerView.
  //
  // `peer` is the registering connection's certificate identity (proto::PeerIdentity; "" on
  // plaintext). A worker id is bound to the identity that registered it: while it is
  // registered, another identity can neither register it again (PermissionDenied) nor
  // heartbeat or deregister it, so one cluster member cannot take over or drop another's id.
  absl::StatusOr<uint64_t> Register(const v1::WorkerInfo& info, const std::string& peer = "");
  // The profiles registering workers of `model` are matched against (the goodput policy's);
  // "" = every model without profiles of its own. Call before workers register.
  void RequireProfiles(std::vector<WorkerProfile> profiles, const std::string& model = "");
  // Applies load and KV events; NotFound if the worker is not registered (it must re-register),
  // PermissionDenied if `peer` is not the identity that registered it.
  absl::Status Heartbeat(const v1::HeartbeatRequest& request, const std::string& peer = "");
  void Remove(const std::string& worker_id, const std::string& reason);
  // A worker's own deregistration: removes it only when `peer` registered it.
  void Deregister(const std::string& worker_id, const std::string& peer);
  // Drops workers whose last heartbeat is older than dead_after. Returns their ids.
  std::vector<std::string> ExpireStale();

  // Every registered worker, sorted by id. With `stubs`, also each one's Worker stub, in the
  // same order.
  std::vector<WorkerView> Snapshot(
      std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs = nullptr) const;
  // The workers of `model`'s pool (and the kvstore daemons that joined it), as Snapshot. Empty
  // for a model not served; with one pool every name is its.
  std::vector<WorkerView> SnapshotModel(
      std::string_view model, std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs = nullptr) const;
  // The gRPC (KvStore service) addresses of the registered kvstore daemons, sorted: what the
  // Registry tells workers that discover their remote tier.
  std::vector<std::string> KvstoreAddresses() const;
  // Who holds which prefix of `chain` in `model`'s index ("" or any name with one pool).
  std::vector<WorkerMatch> MatchPrefix(std::span<const BlockHash> chain,
                                       std::string_view model = "") const;
  // Router-side accounting of requests placed on a worker (for least-loaded between beats).
  void AddInflight(const std::string& worker_id, int64_t delta);
  // A request whose prompt hashes to `chain` was placed on `worker_id`: its blocks go into the
  // model's index as held there (KvIndex::NoteRouted) until the worker's events say, at most
  // kProvisionalTtlS, so a burst sharing a prefix is placed by it before the next heartbeat.
  void NoteRouted(const std::string& worker_id, std::span<const BlockHash> chain,
                  std::string_view model = "");
  static constexpr double kProvisionalTtlS = 5.0;

  uint64_t epoch() const { return epoch_; }
  int num_workers() const;
  // The pools' model names, sorted ({""} for one pool without a name).
  std::vector<std::string> ServedModels() const;
  // Whether `model` is served here (always true with one pool).
  bool Serves(std::string_view model) const;
  // Distinct blocks in the KV index of `model`'s pool; of all pools together for "" with
  // several.
  int64_t num_index_blocks(std::string_view model = "") const;
  // A pool's block size and hash seed source (model identity); 0/"" before its first worker
  // (or for a model not served).
  int block_size(std::string_view model = "") const;
  std::string model_identity(std::string_view model = "") const;
  // Hashes a prompt of `model` as its workers do for a request with cache salt `cache_salt`
  // (the model identity's seed, the cluster key). Seed 0 before the pool's first worker.
  BlockHasher Hasher(std::string_view cache_salt, std::string_view model = "") const;

 private:
  struct Entry {
    WorkerView view;
    std::shared_ptr<v1::Worker::Stub> stub;
    std::string peer;  // the certificate identity that registered it ("" on plaintext)
    // The pools it joined: one for a worker, those of its identity for a kvstore daemon.
    std::vector<std::string> pools;
  };
  // One served model's workers' shared facts and KV index. Pools are made by the constructor
  // and ServeModels and never removed, so a Pool* stays valid while the WorkerPool lives.
  struct Pool {
    std::string model_identity;  // fixed by its first worker
    int block_size = 0;
    // Its first prefill or decode worker's KV pool layout; later ones must match it.
    std::optional<v1::KvLayout> kv_layout;
    std::shared_ptr<const std::vector<WorkerProfile>> profiles;  // null: the default ones
    std::unique_ptr<KvIndex> index = std::make_unique<KvIndex>();
  };
  // The pool of `model` (the only one with one pool), or null.
  const Pool* FindPool(std::string_view model) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Pool* FindPool(std::string_view model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks a worker against its pool; the profile it is to carry in *profile.
  absl::Status CheckWorker(const v1::WorkerInfo& info, const Pool& pool,
                           std::shared_ptr<const WorkerProfile>* profile) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The model identities the pools have, for messages.
  std::vector<std::string> ServedIdentities() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The workers that joined `pool` (every worker for null), sorted by id; the stubs likewise.
  std::vector<WorkerView> SnapshotLocked(const std::string* pool,
                                         std::vector<std::shared_ptr<v1::Worker::Stub>>* stubs)
      const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops a registered worker from its pools' indices and the table.
  void EraseLocked(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration dead_after_;
  const std::shared_ptr<const BlockHashKey> kv_hash_key_;
  const uint64_t epoch_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
  // Profiles for models without their own (RequireProfiles with "").
  std::shared_ptr<const std::vector<WorkerProfile>> default_profiles_ ABSL_GUARDED_BY(mu_);
  WorkerId next_index_id_ ABSL_GUARDED_BY(mu_) = 1;
  // By model name; one entry (named "" or the one served name) takes every worker.
  std::map<std::string, Pool, std::less<>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::router
