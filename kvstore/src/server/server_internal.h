#pragma once
// Internals of the kvstore daemon (kvstore_server.h) shared by its gRPC service
// (server_service.cc) and its process plumbing (server_impl.cc).
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/metrics.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/proto/kvstore.grpc.pb.h"
#include "strata/proto/strata.pb.h"
#include "strata/transport/agent.h"

namespace strata::kvstore::server {

// The pool's store/remove events, queued for the router's registry client, plus the set of
// blocks held now (so a (re-)registration can resend everything).
class EventLog {
 public:
  // A TierEventListener: cheap, never calls back into the tier.
  void OnEvent(const TierEvent& e) ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::KvEvent> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces the queue with one STORED event per held block.
  void Resync() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr size_t kMaxQueued = 1 << 20;  // beyond it a resync rebuilds the view anyway
  absl::Mutex mu_;
  absl::flat_hash_map<BlockHash, BlockHash> held_ ABSL_GUARDED_BY(mu_);  // hash -> parent
  std::vector<v1::KvEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
};

// The daemon's transport agent and block pool. The pool's memory (capacity_bytes, from the
// agent) is allocated and faulted in by Reserve(), before any block size is known; its slots are
// laid over it once, for the first block size that is asked for (options or the first Hello).
class Pool {
 public:
  Pool(const KvStoreServerOptions& options, transport::Agent* agent, EventLog* events)
      : options_(options), agent_(agent), events_(events) {}

  // Allocates the pool's memory now (a no-op once done), so that the first Hello only lays out
  // slots: faulting in a pool of several GiB takes seconds, longer than a client's RPC deadline.
  absl::Status Reserve() ABSL_LOCKS_EXCLUDED(mu_);
  // The pool for `block_bytes` (created now if needed); FailedPrecondition if it exists with
  // another block size or `block_bytes` is 0 before it exists.
  absl::StatusOr<HostTier*> Ensure(size_t block_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  HostTier* tier() const { return tier_ptr_.load(std::memory_order_acquire); }
  const std::string& region_blob() const { return region_blob_; }  // valid once tier() != null
  transport::Agent* agent() const { return agent_; }

 private:
  const KvStoreServerOptions& options_;
  transport::Agent* const agent_;
  EventLog* const events_;
  absl::Mutex mu_;
  absl::Status ReserveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  transport::AllocatedRegion memory_ ABSL_GUARDED_BY(mu_);  // addr null until reserved
  std::unique_ptr<HostTier> tier_ ABSL_GUARDED_BY(mu_);
  std::atomic<HostTier*> tier_ptr_{nullptr};
  std::string region_blob_;  // written once under mu_ before tier_ptr_ is published
};

// Creates the KvStore gRPC service over `pool`. `instance` identifies this daemon start;
// `rpcs` (may be null) counts calls by method and status code.
std::unique_ptr<v1::KvStore::Service> MakeService(const KvStoreServerOptions& options,
                                                  uint64_t instance, Pool* pool,
                                                  metrics::CounterFamily* rpcs);

}  // namespace strata::kvstore::server
