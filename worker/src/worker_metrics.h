#pragma once
// A worker's /metrics: engine load, KV blocks, the transport, the roles' families (prefill/ and
// decode/ add their own), and (mixed role) the API's request metrics. Values owned elsewhere
// are read at scrape time through callbacks.
#include <memory>
#include <string>
#include <vector>

#include "engine_watchdog.h"
#include "strata/common/metrics.h"
#include "strata/decode/decode_driver.h"
#include "strata/decode/decode_service.h"
#include "strata/engine/engine_loop.h"
#include "strata/openai/api_metrics.h"
#include "strata/prefill/prefill_driver.h"
#include "strata/transport/agent.h"

namespace strata::worker {

class WorkerMetrics {
 public:
  // `watchdog` says whether the engine is stalled. Any of prefill / decode may be null. All
  // pointers outlive this object. `handoff_path` is how this worker's KV pool takes part in
  // handoffs ("ucx", "ipc" or "none"), exported as strata_worker_kv_handoff_path{path=...} 1.
  WorkerMetrics(const std::string& worker_id, EngineLoop* loop, const EngineWatchdog* watchdog,
                transport::Agent* agent, prefill::PrefillDriver* prefill,
                decode::DecodeDriver* decode, const std::string& handoff_path);
  std::string Serialize() const { return registry_.Serialize(); }
  // For other parts of the worker to add their families (e.g. the KV tiers).
  metrics::Registry& registry() { return registry_; }
  openai::RequestObserver* observer() { return &api_; }
  // Records one KV transfer into this worker (a remote prefill's blocks landing here).
  void ObserveTransfer(double seconds, uint64_t bytes);

 private:
  void Gauge(const std::string& name, const std::string& help, std::function<double()> fn);
  void CounterFn(const std::string& name, const std::string& help, std::function<double()> fn);

  metrics::Registry registry_;
  openai::ApiMetrics api_;
  std::vector<metrics::CallbackHandle> callbacks_;
  std::unique_ptr<decode::DecodeMetrics> decode_;
};

}  // namespace strata::worker
