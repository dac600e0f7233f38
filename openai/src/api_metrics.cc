#include "strata/openai/api_metrics.h"

#include "absl/strings/str_cat.h"

namespace strata::openai {
namespace {

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75,  1.0,    1.5,   2.0,  3.0,   5.0,  7.5,   10,  20,   40,  80};
}

}  // namespace

ApiMetrics::ApiMetrics(metrics::Registry& r, const std::string& p)
    : requests_(r.CounterOrDie(absl::StrCat(p, "_requests_total"),
                               "OpenAI API requests by endpoint and HTTP status",
                               {"endpoint", "status"})),
      ttft_(r.HistogramOrDie(absl::StrCat(p, "_time_to_first_token_seconds"),
                             "Time from request arrival to the first generated token",
                             LatencyBuckets())),
      itl_(r.HistogramOrDie(absl::StrCat(p, "_inter_token_latency_seconds"),
                            "Time between successive generated tokens of one choice",
                            LatencyBuckets())),
      e2e_(r.HistogramOrDie(absl::StrCat(p, "_e2e_request_latency_seconds"),
                            "Time from request arrival to the end of its response",
                            LatencyBuckets())),
      prompt_tokens_(r.CounterOrDie(absl::StrCat(p, "_prompt_tokens_total"),
                                    "Prompt tokens of completed requests")),
      cached_tokens_(r.CounterOrDie(absl::StrCat(p, "_cached_prompt_tokens_total"),
                                    "Prompt tokens served from a prefix cache")),
      generation_tokens_(
          r.CounterOrDie(absl::StrCat(p, "_generation_tokens_total"), "Generated tokens")),
      cancelled_(r.CounterOrDie(absl::StrCat(p, "_requests_cancelled_total"),
                                "Requests whose client disconnected before the end")),
      shed_(r.CounterOrDie(absl::StrCat(p, "_shed_requests_total"),
                           "Requests refused unread to protect the process, by reason (memory: "
                           "its resident memory was above --max-memory-mb)",
                           {"reason"})),
      unknown_params_(r.CounterOrDie(absl::StrCat(p, "_unknown_params_total"),
                                     "Unrecognized request fields served without", {"param"})) {}

std::string ApiMetrics::ParamLabel(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (param_labels_.contains(name)) return name;
  if (param_labels_.size() >= kMaxParamLabels) return "_other";
  param_labels_.insert(name);
  return name;
}

void ApiMetrics::OnFinished(const RequestRecord& rec) {
  const int status = rec.failed && rec.http_status == 200 ? 500 : rec.http_status;
  requests_.WithLabels({rec.endpoint, absl::StrCat(status)})->Increment();
  if (rec.cancelled) cancelled_.Default()->Increment();
  if (!rec.shed_reason.empty()) shed_.WithLabels({rec.shed_reason})->Increment();
  // Counted when served: a rejected request's fields were not served without.
  if (rec.http_status < 400) {
    for (const std::string& name : rec.unknown_params) {
      unknown_params_.WithLabels({ParamLabel(name)})->Increment();
    }
  }
  if (rec.ttft != absl::InfiniteDuration()) {
    ttft_.Default()->Observe(absl::ToDoubleSeconds(rec.ttft));
  }
  for (absl::Duration gap : rec.inter_token_gaps) itl_.Default()->Observe(absl::ToDoubleSeconds(gap));
  if (!rec.failed) e2e_.Default()->Observe(absl::ToDoubleSeconds(rec.e2e));
  prompt_tokens_.Default()->Increment(double(rec.prompt_tokens));
  cached_tokens_.Default()->Increment(double(rec.cached_tokens));
  generation_tokens_.Default()->Increment(double(rec.completion_tokens));
}

}  // namespace strata::openai
