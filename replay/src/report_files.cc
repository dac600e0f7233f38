// WriteReport: the files of `strata replay --out DIR`.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "strata/replay/report.h"
#include "strata/replay/svg_plot.h"

namespace strata::replay {
namespace {

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

std::string Csv(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string CsvNum(double v) {
  return v < 0 || !std::isfinite(v) ? "" : absl::StrFormat("%.6f", v);
}

std::string RequestsCsv(const std::vector<RequestResult>& results, const SloSpec& slo) {
  std::string out =
      "index,trace_line,scheduled_s,send_s,ttft_s,tpot_s,e2e_s,input_tokens,max_tokens,"
      "prompt_tokens,cached_tokens,completion_tokens,token_chunks,http_status,error,error_type,"
      "meets_slo\n";
  for (const RequestResult& r : results) {
    std::optional<double> tpot = Tpot(r);
    absl::StrAppend(&out, r.index, ",", r.trace_line, ",", CsvNum(r.scheduled_s), ",",
                    CsvNum(r.send_s), ",", CsvNum(r.ttft_s), ",", tpot ? CsvNum(*tpot) : "", ",",
                    CsvNum(r.e2e_s), ",", r.input_tokens, ",", r.max_tokens, ",",
                    r.prompt_tokens, ",", r.cached_tokens, ",", r.completion_tokens, ",",
                    r.token_chunks, ",", r.http_status, ",", ErrorKindName(r.error), ",",
                    Csv(r.error_type), ",", MeetsSlo(r, slo) ? 1 : 0, "\n");
  }
  return out;
}

nlohmann::ordered_json Opt(double v) {
  return v < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

std::string RequestsJsonl(const std::vector<RequestResult>& results, const SloSpec& slo) {
  std::string out;
  for (const RequestResult& r : results) {
    nlohmann::ordered_json j;
    j["index"] = r.index;
    j["trace_line"] = r.trace_line;
    j["scheduled_s"] = r.scheduled_s;
    j["send_s"] = Opt(r.send_s);
    j["ttft_s"] = Opt(r.ttft_s);
    std::optional<double> tpot = Tpot(r);
    j["tpot_s"] = tpot ? nlohmann::ordered_json(*tpot) : nlohmann::ordered_json(nullptr);
    j["e2e_s"] = Opt(r.e2e_s);
    j["gaps_s"] = r.gaps_s;
    j["input_tokens"] = r.input_tokens;
    j["max_tokens"] = r.max_tokens;
    j["prompt_tokens"] = r.prompt_tokens;
    j["cached_tokens"] = r.cached_tokens;
    j["completion_tokens"] = r.completion_tokens;
    j["http_status"] = r.http_status;
    j["retries"] = r.retries;
    j["resumes"] = r.resumes;
    j["error"] = ErrorKindName(r.error);
    j["error_type"] = r.error_type;
    j["error_message"] = r.error_message;
    j["meets_slo"] = MeetsSlo(r, slo);
    absl::StrAppend(&out, j.dump(), "\n");
  }
  return out;
}

// Empirical CDF as a step series: (sorted value i, (i+1)/n).
PlotSeries Cdf(std::string name, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  PlotSeries s{std::move(name), {}, /*step=*/true};
  const double n = static_cast<double>(values.size());
  if (!values.empty()) s.points.emplace_back(values.front(), 0.0);
  for (size_t i = 0; i < values.size(); ++i) s.points.emplace_back(values[i], (i + 1) / n);
  return s;
}

std::string CdfPlot(const std::vector<RequestResult>& results, bool ttft, double slo) {
  std::vector<double> v;
  for (const RequestResult& r : results) {
    if (ttft && r.ok() && r.ttft_s >= 0) v.push_back(r.ttft_s);
    if (!ttft) {
      if (std::optional<double> t = Tpot(r)) v.push_back(*t);
    }
  }
  const std::string what = ttft ? "TTFT" : "TPOT";
  PlotSpec spec;
  spec.title = absl::StrCat(what, " CDF (", v.size(), " completed requests)");
  spec.x_label = absl::StrCat(what, " (seconds)");
  spec.y_label = "fraction of requests";
  spec.y_is_fraction = true;
  spec.series.push_back(Cdf(what, std::move(v)));
  spec.references.push_back({true, slo, absl::StrFormat("SLO %g s", slo)});
  spec.references.push_back({false, 0.9, "90%"});
  return RenderLinePlot(spec);
}

std::string AttainmentPlot(const std::vector<RequestResult>& results, const ReplaySummary& s) {
  double span = 0;
  for (const RequestResult& r : results) span = std::max(span, r.scheduled_s);
  // About 40 buckets, at least 1 s wide; rounded to a 1-2-5 value for readable edges.
  const double bucket = std::max(1.0, NiceTicks(0, std::max(span, 1.0), 40)[1]);
  PlotSeries series{"SLO attainment", {}, false, true};
  for (const AttainmentBucket& b : AttainmentOverTime(results, s.slo, bucket)) {
    series.points.emplace_back(b.start_s + bucket / 2, static_cast<double>(b.met) / b.requests);
  }
  PlotSpec spec;
  spec.title = absl::StrFormat("SLO attainment over time (%g s buckets, overall %.1f%%)", bucket,
                               s.slo_attainment * 100);
  spec.x_label = "scheduled send time (seconds from start)";
  spec.y_label = "requests meeting TTFT and TPOT SLO";
  spec.y_is_fraction = true;
  spec.series.push_back(std::move(series));
  spec.references.push_back({false, 0.9, "90% target"});
  return RenderLinePlot(spec);
}

}  // namespace

absl::Status WriteReport(const std::string& dir, const std::vector<RequestResult>& results,
                         const ReplaySummary& summary) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::filesystem::path d(dir);
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"summary.json", SummaryJson(summary).dump(2) + "\n"},
           {"requests.csv", RequestsCsv(results, summary.slo)},
           {"requests.jsonl", RequestsJsonl(results, summary.slo)},
           {"ttft_cdf.svg", CdfPlot(results, true, summary.slo.ttft_s)},
           {"tpot_cdf.svg", CdfPlot(results, false, summary.slo.tpot_s)},
           {"attainment.svg", AttainmentPlot(results, summary)}}) {
    if (absl::Status st = WriteFile(d / name, text); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace strata::replay
