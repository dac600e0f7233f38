#pragma once
// What placement knows about one worker: its identity, role and the load it last reported, as
// plain values. The router fills these from registrations and heartbeats (worker_pool.h);
// `strata sim` from its simulated workers.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "strata/router/kv_index.h"

namespace strata::router {

struct WorkerProfile;

enum class WorkerRole { kUnspecified, kPrefill, kDecode, kMixed, kKvstore };

// A worker's load as of its last heartbeat (the fields of strata.proto's WorkerLoad).
struct LoadReport {
  int64_t queued_prefill_tokens = 0;  // prompt tokens admitted or waiting but not yet computed
  int32_t running = 0;                // sequences in the running batch
  int32_t waiting = 0;                // sequences waiting for admission
  int32_t free_kv_blocks = 0;
  int32_t total_kv_blocks = 0;
  double step_seconds_ema = 0;  // recent engine step time
  // Total context tokens of the running sequences; 0 = not reported (placement falls back to
  // used KV blocks x block size).
  int64_t decode_context_tokens = 0;
  double prefill_tokens_per_second = 0;
  // Its engine stopped making progress (a hung device): placement skips it until this clears.
  bool stalled = false;
  double stalled_seconds = 0;
};

struct WorkerView {
  WorkerId index_id = 0;  // the worker's id in the KV index
  std::string id;         // unique in the cluster, e.g. "decode-0"
  WorkerRole role = WorkerRole::kUnspecified;
  std::string grpc_address;  // its Worker service
  LoadReport load;
  absl::Time last_heartbeat;
  int64_t inflight = 0;  // requests the router has placed and not seen finish
  // The goodput policy's latency models of this worker (chosen for its model and device at
  // registration); null = the policy's own profile.
  std::shared_ptr<const WorkerProfile> profile;
};

}  // namespace strata::router
