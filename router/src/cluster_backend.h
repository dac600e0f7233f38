#pragma once
// openai::Backend over the cluster: hashes the prompt into block chains, asks the KV index who
// holds what, places the request and streams the decode worker's tokens back. A worker that
// fails is dropped from the pool and the request placed again (up to 3 times): from the start
// when the client has seen nothing yet, or, a stream that had started, resumed from the tokens
// its client has (the worker continues after them).
// Each placement's predicted TTFT is compared with the first token's arrival to keep the
// placer's per-worker correction (and its pending-prefill ledger) current. A request the
// goodput policy could place after waiting for capacity waits in the AdmissionQueue, which is
// woken whenever capacity may have changed. A request that finds no decode worker registered
// waits for one for up to `worker_grace_s` instead of getting 503 at once: within that long of
// the router's start (a router that has just been restarted, whose workers register again with
// their next heartbeat), or of the failure of its own worker (a restarted worker comes back).
// A keyed request (the client's Idempotency-Key) first asks the decode workers whether one holds
// it (a retry after its router died, docs/architecture.md "Router failure") and is served from
// that worker's held generation; otherwise it is placed as usual, with the key, so its worker
// holds it for the next retry.
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "strata/common/metrics.h"
#include "strata/openai/backend.h"
#include "strata/router/admission_queue.h"
#include "strata/router/placement.h"
#include "strata/router/worker_pool.h"
#include "traffic_recorder.h"

namespace strata::router {

struct ClusterBackendMetrics {
  metrics::CounterFamily* placements = nullptr;  // {decode, prefill}
  metrics::CounterFamily* retries = nullptr;
  metrics::Gauge* inflight = nullptr;
  metrics::CounterFamily* rejections = nullptr;       // {reason}: placement said no (429/503)
  metrics::GaugeFamily* ttft_correction = nullptr;    // {worker}: observed / predicted TTFT
  metrics::HistogramFamily* ttft_error = nullptr;     // observed / predicted TTFT per request
  metrics::Gauge* awaiting = nullptr;  // requests waiting for a first decode worker to register
  metrics::Counter* resumes = nullptr;  // streams continued on another worker mid-answer
  metrics::Counter* idle_timeouts = nullptr;  // streams cancelled for silence (a hung worker)
  // {result}: keyed requests that found their held generation ("attached"), did not
  // ("not_found"), or found the key used for another request ("conflict").
  metrics::CounterFamily* attaches = nullptr;
};

// A worker stream the backend's idle check watches (ClusterBackend::Watch).
class WatchedStream {
 public:
  virtual ~WatchedStream() = default;
  // Cancels the stream if nothing arrived on it since `cutoff` (steady-clock seconds,
  // ClusterBackend::Now); cheap and non-blocking, called under the backend's watch lock.
  virtual void CancelIfIdleSince(double cutoff) = 0;
};

class ClusterBackend final : public openai::Backend {
 public:
  // `recorder` (optional, not owned) gets every request as it arrives. `queue` (optional, not
  // owned): requests the goodput policy cannot place now but could after waiting for a decode
  // slot wait there (admission_queue.h) instead of getting 429 at once.
  // `worker_grace_s`: how long after construction, or after its worker failed, a request that
  // finds no decode worker may wait for one (0: answered 503 at once). `stream_idle_timeout_s`: a worker stream on which
  // nothing (no token, no end) arrives for this long is cancelled, its worker dropped from the
  // pool and the request placed again or resumed elsewhere, as when a worker dies (a hung
  // worker's requests move on); 0: no limit. `resume_settle_s`: keyed requests that arrive
  // within this long of construction ask the workers for their held generation only then
  // (workers register again with a restarted router within a heartbeat or two).
  ClusterBackend(WorkerPool* pool, Placer* placer, ClusterBackendMetrics metrics,
                 TrafficRecorder* recorder = nullptr, AdmissionQueue* queue = nullptr,
                 double worker_grace_s = 0, double stream_idle_timeout_s = 0,
                 double resume_settle_s = 0);
  ~ClusterBackend() override;
  std::unique_ptr<openai::GenerationHandle> Generate(openai::GenerateRequest request,
                                                     openai::EventCallback on_event) override;
  bool Ready() const override;
  // The registered workers' last reported load, summed.
  openai::BackendLoad Load() const override;
  bool CanResume() const override { return true; }
  // Stops taking requests; waiting ones are answered 503 at once.
  void SetDraining();
  // Capacity may have changed (a heartbeat, the periodic timer; first tokens and finished
  // streams call it themselves): re-tries waiting requests, expires those out of slack, and
  // resumes the requests waiting for a decode worker once one has registered (or answers them
  // 503 when their grace is over).
  void WakeQueue();
  // Within the worker grace (from the router's start, or from `failed_at_s` >= 0, when the
  // request's worker failed): keeps `resume` until a decode worker of `model` registers (called
  // with OK) or the grace ends or the router drains (called with the error) and returns true;
  // false (nothing kept) after the grace, while draining, or when too many wait already.
  bool AwaitDecodeWorker(std::string model, double failed_at_s,
                         std::function<void(const absl::Status&)> resume);

  // Used by the call when it must place again (engine-independent, so public for the call).
  WorkerPool* pool() const { return pool_; }
  Placer* placer() const { return placer_; }
  AdmissionQueue* queue() const { return queue_; }
  bool draining() const { return draining_; }
  const ClusterBackendMetrics& metrics() const { return metrics_; }
  // Seconds on the steady clock the admission queue runs on.
  static double Now();
  // A stream is checked for silence from Watch until Unwatch (both before it is destroyed);
  // no-ops without an idle timeout.
  void Watch(WatchedStream* stream);
  void Unwatch(WatchedStream* stream);
  double stream_idle_timeout_s() const { return stream_idle_timeout_s_; }

 private:
  static constexpr size_t kMaxAwaiting = 4096;
  // A decode-capable worker of `model` (of any model for nullopt) is registered.
  bool HasDecodeWorker(const std::optional<std::string>& model) const;
  void ResumeAwaiting();

  WorkerPool* pool_;
  Placer* placer_;
  ClusterBackendMetrics metrics_;
  TrafficRecorder* recorder_;
  AdmissionQueue* queue_;
  std::atomic<bool> draining_{false};
  const double worker_grace_s_;
  const double started_s_;
  struct Awaiting {
    double deadline_s;
    std::string model;
    std::function<void(const absl::Status&)> resume;
  };
  absl::Mutex await_mu_;
  std::vector<Awaiting> awaiting_ ABSL_GUARDED_BY(await_mu_);
  std::atomic<int> awaiting_count_{0};
  // The idle check: a thread cancels watched streams silent for stream_idle_timeout_s_.
  void CheckIdleStreams();
  const double stream_idle_timeout_s_;
  const double resume_settle_s_;
  absl::Mutex watch_mu_;
  absl::flat_hash_set<WatchedStream*> watched_ ABSL_GUARDED_BY(watch_mu_);
  absl::Notification stop_watch_;
  std::thread watch_thread_;
};

}  // namespace strata::router
