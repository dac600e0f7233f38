#pragma once
// One simulated worker engine (internal to strata::sim): waiting queue, admission under
// max_running and KV blocks, steps of decode tokens + chunked prefill timed by the profile.
#include <cstdint>
#include <deque>
#include <queue>
#include <vector>

#include "strata/router/latency_model.h"
#include "strata/router/worker_view.h"
#include "strata/sim/prefix_cache.h"

namespace strata::sim {

// What a request does on a worker.
enum class Phase : uint8_t {
  kPrefillOnly,  // compute the prompt, then hand the KV to a decode worker
  kLocal,        // compute the prompt, then decode here (mixed worker, or no prefill worker)
  kDecodeOnly,   // KV arrived from a prefill worker: decode only
};

// Per-request simulation state, owned by the simulator and shared by index with the workers.
struct SimRequest {
  int32_t input = 0, output = 0;
  double arrival = 0;
  std::vector<BlockHash> chain;  // full prompt blocks; cleared when the request ends
  int prefill_worker = -1, decode_worker = -1;
  int32_t decode_cached_blocks = 0;  // placement's view of the decode worker's prefix
  // On the current worker:
  Phase phase = Phase::kLocal;
  int32_t committed = 0;       // chain blocks held as hashed blocks
  int64_t private_blocks = 0;  // blocks held privately
  int64_t to_compute = 0;      // prompt tokens still to prefill
  int32_t cached_tokens = 0;   // prompt tokens reused from the prefix cache
  int64_t join_step = 0;       // decode step count when decoding started here
  double first_token = -1;     // absolute time of the first token
};

// Callbacks from a worker to the simulator.
class WorkerListener {
 public:
  virtual ~WorkerListener() = default;
  virtual void OnPrefillDone(int request, double now) = 0;  // kPrefillOnly finished
  virtual void OnFirstToken(int request, double now) = 0;   // kLocal prefill finished
  virtual void OnFinished(int request, double now, int worker) = 0;
  virtual void OnUnservable(int request, int worker) = 0;  // needs more blocks than exist
};

class SimWorker {
 public:
  SimWorker(int index, router::WorkerRole role, const router::WorkerProfile& profile,
            int64_t max_batch_tokens, bool record_gaps, std::vector<SimRequest>* requests,
            WorkerListener* listener);

  void Enqueue(int request, Phase phase);
  // Starts a step when idle and there is work; returns its duration, or -1 (stays idle).
  double MaybeStartStep();
  // Ends the running step at `now` (the time MaybeStartStep's duration elapsed).
  void FinishStep(double now);

  bool busy() const { return busy_; }
  router::LoadReport Load() const;  // what a heartbeat would report now
  std::vector<router::KvEvent>& pending_events() { return events_; }
  const PrefixCache& cache() const { return cache_; }
  int64_t steps() const { return step_count_; }
  // Gaps between the first token (at `first_token`) and the decode steps that followed.
  void AppendGaps(const SimRequest& r, std::vector<double>* gaps) const;

 private:
  struct Finish {
    int64_t step;
    int request;
    bool operator>(const Finish& o) const {
      return step != o.step ? step > o.step : request > o.request;
    }
  };
  bool TryAdmit(int request);
  void AdmitWaiting();
  bool HasPrefillBudget() const;
  void CommitComputed(SimRequest& r);
  void EndPrefill(int request, double now);
  void StartDecoding(int request);
  void Finished(int request, double now);
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  const int index_;
  const router::WorkerRole role_;
  const router::WorkerProfile& profile_;
  const int block_size_;
  const int64_t max_batch_tokens_;
  const bool record_gaps_;
  std::vector<SimRequest>& requests_;
  WorkerListener* listener_;
  PrefixCache cache_;
  std::vector<router::KvEvent> events_;

  std::deque<int> waiting_;
  std::vector<int> prefilling_;  // admitted, prompt not yet computed (admission order)
  int64_t decoding_ = 0;         // sequences in the decode batch
  int64_t context_sum_ = 0;      // their total context tokens
  int64_t queued_prefill_tokens_ = 0;
  std::priority_queue<Finish, std::vector<Finish>, std::greater<Finish>> finishes_;
  int64_t step_count_ = 0;        // decode steps (steps with a decode batch) so far
  std::vector<double> step_end_;  // end time of decode step k at [k - 1] (record_gaps)

  bool busy_ = false;
  int64_t step_batch_ = 0;                            // decode batch of the running step
  std::vector<std::pair<int, int64_t>> step_chunks_;  // (request, tokens) of the running step
  std::vector<int64_t> chunk_tokens_;
  std::vector<int64_t> chunk_context_;  // tokens already in each chunk's KV before it
  double step_ema_ = 0;
};

}  // namespace strata::sim
