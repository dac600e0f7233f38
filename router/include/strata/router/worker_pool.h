#pragma once
// The router's live view of the workers: who is registered, in which role, how loaded (from
// heartbeats), and what their KV caches hold (the global KV index, fed by the heartbeats' KV
// events). Workers that miss heartbeats for `dead_after` are dropped (and their index entries
// pruned); a worker that fails a request is marked down at once.
//
// Thread-safety: every method is thread-safe.
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

  // Adds or replaces the worker. The first worker's model identity fixes the cluster's; a
  // worker serving another model, or keying block hashes with another key, is rejected with
  // FailedPrecondition. With RequireProfiles, so is a worker (not a kvstore daemon) that no
  // profile describes (ChooseProfile by its model and device); the chosen one rides in its
  // WorkerView.
  //
  // `peer` is the registering connection's certificate identity (proto::PeerIdentity; "" on
  // plaintext). A worker id is bound to the identity that registered it: while it is
  // registered, another identity can neither register it again (PermissionDenied) nor
  // heartbeat or deregister it, so one cluster member cannot take over or drop another's id.
  absl::StatusOr<uint64_t> Register(const v1::WorkerInfo& info, const std::string& peer = "");
  // The profiles registering workers are matched against (the goodput policy's); call before
  // workers register.
  void RequireProfiles(std::vector<WorkerProfile> profiles);
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
  // The gRPC (KvStore service) addresses of the registered kvstore daemons, sorted: what the
  // Registry tells workers that discover their remote tier.
  std::vector<std::string> KvstoreAddresses() const;
  std::vector<WorkerMatch> MatchPrefix(std::span<const BlockHash> chain) const {
    return index_.MatchPrefix(chain);
  }
  // Router-side accounting of requests placed on a worker (for least-loaded between beats).
  void AddInflight(const std::string& worker_id, int64_t delta);

  uint64_t epoch() const { return epoch_; }
  int num_workers() const;
  const KvIndex& index() const { return index_; }
  // The cluster's block size and hash seed source (model identity); 0/"" before any worker.
  int block_size() const;
  std::string model_identity() const;
  // Hashes a prompt as the workers do for a request with cache salt `cache_salt` (the model
  // identity's seed, the cluster key). Seed 0 before any worker registered.
  BlockHasher Hasher(std::string_view cache_salt) const;

 private:
  struct Entry {
    WorkerView view;
    std::shared_ptr<v1::Worker::Stub> stub;
    std::string peer;  // the certificate identity that registered it ("" on plaintext)
  };

  const absl::Duration dead_after_;
  const std::shared_ptr<const BlockHashKey> kv_hash_key_;
  const uint64_t epoch_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<WorkerProfile>> profiles_ ABSL_GUARDED_BY(mu_);
  WorkerId next_index_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::string model_identity_ ABSL_GUARDED_BY(mu_);
  int block_size_ ABSL_GUARDED_BY(mu_) = 0;
  // The first prefill or decode worker's KV pool layout; later ones must match it.
  std::optional<v1::KvLayout> kv_layout_ ABSL_GUARDED_BY(mu_);
  KvIndex index_;
};

}  // namespace strata::router
