#pragma once
// Turning per-request replay results into the numbers operators judge a serving system by, and
// writing them out (summary.json, requests.csv, requests.jsonl, SVG plots).
//
// Definitions (all times in seconds):
//   TTFT       RequestResult::ttft_s (send to first token chunk).
//   TPOT       (e2e - ttft) / (completion_tokens - 1): the mean time per output token after the
//              first. Defined only for completed requests with completion_tokens >= 2; a request
//              with fewer tokens has no TPOT, is left out of the TPOT percentiles and counts as
//              meeting the TPOT SLO (it has no decode phase to miss it with).
//   completed  no error (HTTP 200, stream ended with [DONE]).
//   meets SLO  completed AND ttft <= slo.ttft_s AND (no TPOT or tpot <= slo.tpot_s).
//   attainment requests meeting the SLO / all requests (failed requests count as misses).
//   duration   from the first send to the last request's end (0 when nothing was sent).
//   throughput completed / duration; goodput = requests meeting the SLO / duration.
//   Percentiles are linearly interpolated between order statistics (numpy's default,
//   "linear"): p-th percentile of sorted x[0..n-1] is at rank p/100 * (n - 1). NaN when empty.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "strata/replay/replayer.h"

namespace strata::replay {

struct SloSpec {
  double ttft_s = 2.0;
  double tpot_s = 0.1;
};

// Linear-interpolated percentile (p in [0, 100]) of `values` (any order); NaN when empty.
double Percentile(std::vector<double> values, double p);

// TPOT as defined above; nullopt when not defined.
std::optional<double> Tpot(const RequestResult& r);
bool MeetsSlo(const RequestResult& r, const SloSpec& slo);

struct LatencyStats {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;  // NaN when no samples.
  int64_t count = 0;
};
LatencyStats ComputeStats(const std::vector<double>& values);

struct ReplaySummary {
  int64_t requests = 0;
  int64_t completed = 0;
  int64_t errors = 0;
  int64_t slo_met = 0;
  double duration_s = 0;
  double throughput_rps = 0;
  double output_tokens_per_s = 0;
  double slo_attainment = 0;  // 0..1; 0 when there are no requests.
  double goodput_rps = 0;
  LatencyStats ttft, tpot, e2e, itl;  // itl: every inter-chunk gap of completed requests.
  double send_lag_p99_s = 0;          // Dispatch lag (send_s - scheduled_s) p99.
  int64_t prompt_tokens = 0;          // Sums over completed requests (from usage).
  int64_t prefix_cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::map<std::string, int64_t> errors_by_kind;  // ErrorKindName -> count (errors only).
  std::map<std::string, int64_t> errors_by_type;  // "kind:type" -> count.
  SloSpec slo;
};

ReplaySummary Summarize(const std::vector<RequestResult>& results, const SloSpec& slo);

// Attainment per bucket of send time: bucket b holds requests with
// b*bucket_s <= scheduled_s < (b+1)*bucket_s. Empty buckets are omitted.
struct AttainmentBucket {
  double start_s = 0;
  int64_t requests = 0;
  int64_t met = 0;
};
std::vector<AttainmentBucket> AttainmentOverTime(const std::vector<RequestResult>& results,
                                                 const SloSpec& slo, double bucket_s);

// summary.json's object (keys listed in docs/replay.md; NaN percentiles are written as null).
nlohmann::ordered_json SummaryJson(const ReplaySummary& s);
// One line per request, human text (the progress line's final form plus percentiles).
std::string FormatSummary(const ReplaySummary& s);

// Writes summary.json, requests.csv, requests.jsonl, ttft_cdf.svg, tpot_cdf.svg (empirical CDFs
// with the SLO marked) and attainment.svg (attainment per send-time bucket) into `dir` (created
// if missing). Internal error naming the file on an I/O failure.
absl::Status WriteReport(const std::string& dir, const std::vector<RequestResult>& results,
                         const ReplaySummary& summary);

}  // namespace strata::replay
