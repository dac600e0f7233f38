#include "strata/replay/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "strata/replay/svg_plot.h"

namespace strata::replay {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

std::optional<double> Tpot(const RequestResult& r) {
  if (!r.ok() || r.completion_tokens < 2 || r.ttft_s < 0) return std::nullopt;
  return (r.e2e_s - r.ttft_s) / static_cast<double>(r.completion_tokens - 1);
}

bool MeetsSlo(const RequestResult& r, const SloSpec& slo) {
  if (!r.ok() || r.ttft_s < 0 || r.ttft_s > slo.ttft_s) return false;
  std::optional<double> tpot = Tpot(r);
  return !tpot || *tpot <= slo.tpot_s;
}

LatencyStats ComputeStats(const std::vector<double>& values) {
  LatencyStats s;
  s.count = static_cast<int64_t>(values.size());
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = values.empty() ? kNaN : sum / static_cast<double>(values.size());
  return s;
}

ReplaySummary Summarize(const std::vector<RequestResult>& results, const SloSpec& slo) {
  ReplaySummary s;
  s.slo = slo;
  s.requests = static_cast<int64_t>(results.size());
  std::vector<double> ttft, tpot, e2e, itl, lag;
  double first_send = std::numeric_limits<double>::infinity(), last_end = 0;
  for (const RequestResult& r : results) {
    if (r.send_s >= 0) {
      first_send = std::min(first_send, r.send_s);
      last_end = std::max(last_end, r.send_s + std::max(0.0, r.e2e_s));
      lag.push_back(r.send_s - r.scheduled_s);
    }
    if (MeetsSlo(r, slo)) ++s.slo_met;
    if (!r.ok()) {
      ++s.errors;
      ++s.errors_by_kind[std::string(ErrorKindName(r.error))];
      ++s.errors_by_type[absl::StrCat(ErrorKindName(r.error), ":", r.error_type)];
      continue;
    }
    ++s.completed;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s);
    if (std::optional<double> t = Tpot(r)) tpot.push_back(*t);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.gaps_s.begin(), r.gaps_s.end());
    s.prompt_tokens += std::max(0, r.prompt_tokens);
    s.prefix_cached_tokens += std::max(0, r.cached_tokens);
    s.completion_tokens += std::max(0, r.completion_tokens);
  }
  s.duration_s = std::isfinite(first_send) ? last_end - first_send : 0.0;
  const double d = s.duration_s > 0 ? s.duration_s : kNaN;
  s.throughput_rps = s.duration_s > 0 ? s.completed / d : 0.0;
  s.goodput_rps = s.duration_s > 0 ? s.slo_met / d : 0.0;
  s.output_tokens_per_s = s.duration_s > 0 ? s.completion_tokens / d : 0.0;
  s.slo_attainment = s.requests > 0 ? static_cast<double>(s.slo_met) / s.requests : 0.0;
  s.ttft = ComputeStats(ttft);
  s.tpot = ComputeStats(tpot);
  s.e2e = ComputeStats(e2e);
  s.itl = ComputeStats(itl);
  s.send_lag_p99_s = lag.empty() ? 0.0 : Percentile(lag, 99);
  return s;
}

std::vector<AttainmentBucket> AttainmentOverTime(const std::vector<RequestResult>& results,
                                                 const SloSpec& slo, double bucket_s) {
  std::map<int64_t, AttainmentBucket> buckets;
  for (const RequestResult& r : results) {
    const int64_t b = static_cast<int64_t>(std::floor(r.scheduled_s / bucket_s));
    AttainmentBucket& a = buckets[b];
    a.start_s = static_cast<double>(b) * bucket_s;
    ++a.requests;
    if (MeetsSlo(r, slo)) ++a.met;
  }
  std::vector<AttainmentBucket> out;
  for (auto& [b, a] : buckets) out.push_back(a);
  return out;
}

namespace {

nlohmann::ordered_json Num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

void PutStats(nlohmann::ordered_json& j, const std::string& name, const LatencyStats& s) {
  j[name + "_p50_s"] = Num(s.p50);
  j[name + "_p90_s"] = Num(s.p90);
  j[name + "_p99_s"] = Num(s.p99);
  j[name + "_mean_s"] = Num(s.mean);
}

}  // namespace

nlohmann::ordered_json SummaryJson(const ReplaySummary& s) {
  nlohmann::ordered_json j;
  j["requests"] = s.requests;
  j["completed"] = s.completed;
  j["errors"] = s.errors;
  j["slo_met"] = s.slo_met;
  j["duration_s"] = s.duration_s;
  j["throughput_rps"] = s.throughput_rps;
  j["output_tokens_per_s"] = s.output_tokens_per_s;
  j["slo_attainment"] = s.slo_attainment;
  j["goodput_rps"] = s.goodput_rps;
  j["slo_ttft_s"] = s.slo.ttft_s;
  j["slo_tpot_s"] = s.slo.tpot_s;
  PutStats(j, "ttft", s.ttft);
  PutStats(j, "tpot", s.tpot);
  PutStats(j, "e2e", s.e2e);
  PutStats(j, "itl", s.itl);
  j["send_lag_p99_s"] = s.send_lag_p99_s;
  j["prompt_tokens"] = s.prompt_tokens;
  j["prefix_cached_tokens"] = s.prefix_cached_tokens;
  j["prefix_cache_hit_rate"] =
      s.prompt_tokens > 0 ? static_cast<double>(s.prefix_cached_tokens) / s.prompt_tokens : 0.0;
  j["completion_tokens"] = s.completion_tokens;
  j["errors_by_kind"] = s.errors_by_kind;
  j["errors_by_type"] = s.errors_by_type;
  return j;
}

std::string FormatSummary(const ReplaySummary& s) {
  auto ms = [](const LatencyStats& l) {
    return absl::StrFormat("p50 %.1f ms  p90 %.1f ms  p99 %.1f ms", l.p50 * 1e3, l.p90 * 1e3,
                           l.p99 * 1e3);
  };
  std::string errors;
  for (const auto& [k, n] : s.errors_by_type) absl::StrAppend(&errors, " ", k, "=", n);
  return absl::StrFormat(
      "requests %d  completed %d  errors %d%s\n"
      "duration %.2f s  throughput %.3f req/s  output %.1f tok/s\n"
      "SLO (TTFT <= %g s, TPOT <= %g s): attainment %.1f%%  goodput %.3f req/s\n"
      "TTFT  %s\nTPOT  %s\nE2E   %s\n"
      "prompt tokens %d  prefix-cached %d (%.1f%%)  completion tokens %d\n",
      s.requests, s.completed, s.errors, errors, s.duration_s, s.throughput_rps,
      s.output_tokens_per_s, s.slo.ttft_s, s.slo.tpot_s, s.slo_attainment * 100, s.goodput_rps,
      ms(s.ttft), ms(s.tpot), ms(s.e2e), s.prompt_tokens, s.prefix_cached_tokens,
      s.prompt_tokens > 0 ? 100.0 * s.prefix_cached_tokens / s.prompt_tokens : 0.0,
      s.completion_tokens);
}

}  // namespace strata::replay
