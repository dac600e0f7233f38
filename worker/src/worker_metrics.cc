#include "worker_metrics.h"

#include <utility>

#include "strata/prefill/prefill_service.h"

namespace strata::worker {

WorkerMetrics::WorkerMetrics(const std::string& worker_id, EngineLoop* loop,
                             const EngineWatchdog* watchdog, transport::Agent* agent,
                             prefill::PrefillDriver* prefill, decode::DecodeDriver* decode,
                             const std::string& handoff_path)
    : api_(registry_, "strata_worker"),
      decode_(std::make_unique<decode::DecodeMetrics>(registry_, decode)) {
  Gauge("strata_worker_running_requests", "Sequences in the running batch",
        [loop] { return loop->load().running; });
  Gauge("strata_worker_waiting_requests", "Sequences waiting for admission (queue depth)",
        [loop] { return loop->load().waiting; });
  Gauge("strata_worker_queued_prefill_tokens", "Prompt tokens not yet computed",
        [loop] { return double(loop->load().queued_prefill_tokens); });
  Gauge("strata_worker_kv_blocks_capacity", "KV cache blocks in the pool",
        [loop] { return loop->load().total_kv_blocks; });
  Gauge("strata_worker_kv_blocks_used", "KV cache blocks referenced by requests",
        [loop] {
          const EngineLoad l = loop->load();
          return double(l.total_kv_blocks - l.free_kv_blocks);
        });
  Gauge("strata_worker_step_seconds", "Recent engine step time (exponential moving average)",
        [loop] { return loop->load().step_seconds_ema; });
  Gauge("strata_worker_engine_stalled",
        "1 while the engine has had work and completed no step for longer than its stall limit "
        "(--engine-stall-timeout-s): /health answers 503 and the router places nothing here",
        [watchdog] { return watchdog->Stalled() ? 1.0 : 0.0; });
  Gauge("strata_worker_engine_last_progress_age_seconds",
        "Seconds since the engine last completed a step or posted work while it has work (0 "
        "while idle)",
        [watchdog] { return absl::ToDoubleSeconds(watchdog->Age()); });
  CounterFn("strata_worker_prompt_tokens_computed_total",
            "Prompt tokens this worker's engine computed (not served from a KV cache or tier)",
            [loop] { return static_cast<double>(loop->load().prompt_tokens_computed); });
  CounterFn("strata_worker_engine_steps_total", "Engine steps run",
            [loop] { return double(loop->load().steps); });
  CounterFn("strata_worker_transport_bytes_written_total", "KV bytes written to peers",
            [agent] { return double(agent->Stats().bytes_written); });
  CounterFn("strata_worker_transport_transfers_failed_total", "KV transfers that failed",
            [agent] { return double(agent->Stats().transfers_failed); });
  CounterFn("strata_worker_transport_device_copies_total",
            "Batched device-to-device KV copies into peers' mapped pools (the ipc path)",
            [agent] { return double(agent->Stats().device_copies); });
  CounterFn("strata_worker_transport_device_bytes_total",
            "KV bytes moved by device-to-device copies (the ipc path)",
            [agent] { return double(agent->Stats().device_bytes); });
  CounterFn("strata_worker_transport_staged_pieces_total",
            "KV pieces sent to peers on the staged path (device memory through pinned host "
            "buffers and UCX)",
            [agent] { return double(agent->Stats().staged_pieces_sent); });
  CounterFn("strata_worker_transport_staged_bytes_total",
            "KV bytes written to peers on the staged path",
            [agent] { return double(agent->Stats().staged_bytes_sent); });
  Gauge("strata_worker_transport_staged_receive_slots_busy",
        "Page-locked staging slots holding a KV piece received from a peer",
        [agent] { return double(agent->Stats().staged_receive_slots_busy); });
  callbacks_.push_back(
      registry_
          .GaugeOrDie("strata_worker_kv_handoff_path",
                      "How this worker's KV pool takes part in prefill/decode handoffs: ucx "
                      "(host memory), ipc (device memory mapped between processes of a host, "
                      "staged to other hosts), staged (always through pinned host memory), none",
                      {"path"})
          .AddCallback({handoff_path}, [] { return 1.0; }));
  for (auto& handle : prefill::RegisterPrefillMetrics(registry_, prefill)) {
    callbacks_.push_back(std::move(handle));
  }
  (void)worker_id;
}

void WorkerMetrics::ObserveTransfer(double seconds, uint64_t bytes) {
  decode_->ObserveTransfer(seconds, bytes);
}

void WorkerMetrics::Gauge(const std::string& name, const std::string& help,
                          std::function<double()> fn) {
  callbacks_.push_back(registry_.GaugeOrDie(name, help).AddCallback({}, std::move(fn)));
}

void WorkerMetrics::CounterFn(const std::string& name, const std::string& help,
                              std::function<double()> fn) {
  callbacks_.push_back(registry_.CounterOrDie(name, help).AddCallback({}, std::move(fn)));
}

}  // namespace strata::worker
