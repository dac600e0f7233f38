#pragma once
// Prometheus metrics of the OpenAI front end, fed by its RequestObserver hook:
//   <prefix>_requests_total{endpoint,status}            requests by HTTP status
//   <prefix>_time_to_first_token_seconds                 histogram
//   <prefix>_inter_token_latency_seconds                 histogram (every gap between tokens)
//   <prefix>_e2e_request_latency_seconds                 histogram
//   <prefix>_prompt_tokens_total, _cached_prompt_tokens_total, _generation_tokens_total
//   <prefix>_requests_cancelled_total                    clients that disconnected first
//   <prefix>_shed_requests_total{reason}                 requests refused unread to protect the
//                                                        process (reason="memory": over its
//                                                        memory limit)
//   <prefix>_unknown_params_total{param}                 unrecognized request fields served
//                                                        without (the first kMaxParamLabels
//                                                        names get their own label; the rest
//                                                        count as param="_other")
// The router uses prefix "strata_router", a mixed worker "strata_worker".
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "strata/common/metrics.h"
#include "strata/openai/frontend.h"

namespace strata::openai {

class ApiMetrics final : public RequestObserver {
 public:
  ApiMetrics(metrics::Registry& registry, const std::string& prefix);
  void OnFinished(const RequestRecord& record) override;

  static constexpr size_t kMaxParamLabels = 32;

 private:
  // The label for an unknown field name: itself while the label set has room, else "_other".
  std::string ParamLabel(const std::string& name);

  metrics::CounterFamily& requests_;
  metrics::HistogramFamily& ttft_;
  metrics::HistogramFamily& itl_;
  metrics::HistogramFamily& e2e_;
  metrics::CounterFamily& prompt_tokens_;
  metrics::CounterFamily& cached_tokens_;
  metrics::CounterFamily& generation_tokens_;
  metrics::CounterFamily& cancelled_;
  metrics::CounterFamily& shed_;
  metrics::CounterFamily& unknown_params_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> param_labels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::openai
