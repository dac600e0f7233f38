#include "worker_metrics.h"

namespace strata::worker {

WorkerMetrics::WorkerMetrics(const std::string& worker_id, EngineLoop* loop,
                             transport::Agent* agent, prefill::PrefillDriver* prefill,
                             decode::DecodeDriver* decode)
    : api_(registry_, "strata_worker"),
      transfer_seconds_(registry_
                            .HistogramOrDie("strata_worker_kv_transfer_seconds",
                                            "KV transfer time of a remote prefill into this "
                                            "worker (first write posted to last landed)",
                                            metrics::ExponentialBuckets(0.0001, 2, 18))
                            .Default()),
      transfer_bytes_(registry_
                          .HistogramOrDie("strata_worker_kv_transfer_bytes",
                                          "KV bytes of one remote prefill into this worker",
                                          metrics::ExponentialBuckets(4096, 4, 12))
                          .Default()) {
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
  CounterFn("strata_worker_prompt_tokens_computed_total",
            "Prompt tokens this worker's engine computed (not served from a KV cache or tier)",
            [loop] { return static_cast<double>(loop->load().prompt_tokens_computed); });
  CounterFn("strata_worker_engine_steps_total", "Engine steps run",
            [loop] { return double(loop->load().steps); });
  CounterFn("strata_worker_transport_bytes_written_total", "KV bytes written to peers",
            [agent] { return double(agent->Stats().bytes_written); });
  CounterFn("strata_worker_transport_transfers_failed_total", "KV transfers that failed",
            [agent] { return double(agent->Stats().transfers_failed); });
  if (prefill != nullptr) {
    CounterFn("strata_worker_prefill_jobs_total", "Prefills computed for decode workers",
              [prefill] { return double(prefill->stats().jobs); });
    CounterFn("strata_worker_prefill_failed_total", "Prefills for decode workers that failed",
              [prefill] { return double(prefill->stats().failed); });
    CounterFn("strata_worker_prefill_aborted_before_start_total",
              "Prefills refused because the decode worker's abort arrived before them",
              [prefill] { return double(prefill->stats().aborted_before_start); });
  }
  if (decode != nullptr) {
    CounterFn("strata_worker_kv_received_bytes_total", "KV bytes prefill workers wrote here",
              [decode] { return double(decode->stats().bytes_received); });
  }
  (void)worker_id;
}

void WorkerMetrics::ObserveTransfer(double seconds, uint64_t bytes) {
  transfer_seconds_->Observe(seconds);
  transfer_bytes_->Observe(double(bytes));
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
