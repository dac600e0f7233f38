#pragma once
// `strata sim`: a discrete-event simulation of a strata cluster serving a request trace, with
// the router's own placement code (router::Placer) and global KV index (router::KvIndex).
//
// Model (docs/sim.md has the whole story):
//   - Time advances from event to event (request arrival, engine step end, KV transfer landed,
//     heartbeat), ordered by (time, sequence number), so a run is a pure function of its inputs.
//   - Every request is placed at its arrival by Placer::Place over WorkerViews built from the
//     simulated workers (heartbeat load fields, the router's inflight counts) and the prompt's
//     KvIndex::MatchPrefix. A placement error is a failed request (429 for ResourceExhausted,
//     503 otherwise), reported like `strata replay` reports one — except one that says waiting
//     could meet the SLO (router::MinTtftIfWaited): it waits in the router's own
//     router::AdmissionQueue (when `admission.capacity` > 0), which is woken, as the router
//     wakes it, when a first token arrives, a request ends or a heartbeat comes, and at the
//     next slack expiry; its TTFT counts from its arrival.
//   - Each worker is an engine: a FIFO waiting queue; admission when a sequence slot
//     (max_running) and the request's KV blocks (G1 PrefixCache, LRU-evicted) are free; steps
//     of one decode token per running sequence plus prefill chunks under max_batch_tokens
//     (chunked prefill), timed by the profile's latency models. Only the uncached part of a
//     prompt is computed.
//   - Disaggregated: the prefill worker computes the prompt, the KV moves to the decode worker
//     (kv_transfer link model, only blocks the decode worker did not cache), the first token
//     counts when the transfer has landed, then the decode worker decodes the rest.
//   - Workers' KV events reach the index with their heartbeat (every heartbeat_interval_s, or
//     at once when it is 0), as they reach the real router.
//
// Thread-compatible: Simulate() keeps all state on its stack; concurrent calls are fine.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/common/block_hash.h"
#include "strata/replay/replayer.h"
#include "strata/replay/trace.h"
#include "strata/router/admission_queue.h"
#include "strata/router/latency_model.h"
#include "strata/router/placement.h"

namespace strata::sim {

// The simulated GPUs: P prefill + D decode workers, or N mixed (aggregated) workers.
struct ClusterShape {
  int prefill = 0;
  int decode = 0;
  int mixed = 0;
  // Prefill worker i and decode worker i share one device (prefill == decode), as two worker
  // processes on one GPU do: they time-slice it, so a step that starts while its partner's step
  // runs takes twice its profiled time (each gets half the device; the partner's step already
  // under way keeps its time: an approximation of processor sharing).
  bool colocated = false;
  int gpus() const { return colocated ? prefill + mixed : prefill + decode + mixed; }
  bool aggregated() const { return mixed > 0; }
  std::string ToString() const;  // "4P:12D", "1P:1D colocated" or "16 mixed"
};

struct SimOptions {
  router::WorkerProfile profile;
  ClusterShape shape;
  router::PlacementOptions placement;
  router::AdmissionOptions admission;  // the router's defaults; capacity 0: no queue
  uint64_t seed = 0;                  // block-hash seed of the synthesized prompts
  double heartbeat_interval_s = 0.5;  // 0: the router sees load and KV events at once
  int64_t max_batch_tokens = 0;       // chunked-prefill budget per step; 0: the profile's
  bool record_gaps = true;            // per-token gaps (ITL); off saves memory in searches
};

struct SimStats {
  int64_t events = 0;           // events processed
  int64_t steps = 0;            // engine steps over all workers
  int64_t remote_prefills = 0;  // placements with a separate prefill worker
  int64_t rejected = 0;         // placement errors (429/503), at arrival or from the queue
  int64_t queued = 0;           // requests that waited in the admission queue
  int64_t queue_placed = 0;     // ... and were placed from it
  int64_t slack_expired = 0;    // ... and were rejected when their slack ran out
  int64_t queue_full = 0;       // rejected because the queue was full
  int64_t kv_events = 0;        // stored + removed events published to the index
  int64_t evictions = 0;        // G1 blocks evicted over all workers
  double simulated_s = 0;       // time of the last event
};

struct SimResult {
  std::vector<replay::RequestResult> results;  // results[i] belongs to requests[i]
  SimStats stats;
};

// Called about every `progress_every` finished requests and once at the end.
using SimProgress = std::function<void(int64_t finished, int64_t total, double simulated_s)>;

// Runs the trace (arrival_s non-decreasing, already windowed / sped up) on the cluster.
// InvalidArgument for a bad shape, profile (block_size must divide 512, positive capacities)
// or policy name, or unsorted arrivals.
absl::StatusOr<SimResult> Simulate(const std::vector<replay::TraceRequest>& requests,
                                   const SimOptions& options, const SimProgress& progress = {},
                                   int64_t progress_every = 1000);

// A profile with num_kv_blocks 0 ("the engine's default") gets what a worker started with
// default flags has: kDefaultKvCacheBytes (`strata worker --kv-cache-mb 256`) / kv_block_bytes.
inline constexpr int64_t kDefaultKvCacheBytes = int64_t{256} << 20;
router::WorkerProfile EffectiveProfile(const router::WorkerProfile& profile);

// The engine-block chain hashes of a request's full prompt blocks. A trace block id (512
// tokens) expands to 512 / block_size engine blocks chained as HashBlock(seed, parent,
// {id low 32 bits, id high 32 bits, sub-block}), so requests sharing trace block ids share
// engine blocks exactly. Requests without block ids get a chain unique to request_index.
std::vector<BlockHash> TraceBlockChain(const replay::TraceRequest& request, uint64_t request_index,
                                       int block_size, uint64_t seed);

}  // namespace strata::sim
