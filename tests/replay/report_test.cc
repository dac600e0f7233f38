// The replay report's math (percentiles, TPOT, attainment, goodput) on hand-computed data, the
// files it writes, the SVG renderer and the goodput search.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "strata/replay/goodput_search.h"
#include "strata/replay/report.h"
#include "strata/replay/svg_plot.h"

namespace strata::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PercentileTest, LinearInterpolationLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97.
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({5}, 99), 5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 100), 2);
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
}

RequestResult Done(double send, double ttft, double e2e, int completion, int cached = 0) {
  RequestResult r;
  r.scheduled_s = send;
  r.send_s = send;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.completion_tokens = completion;
  r.prompt_tokens = 100;
  r.cached_tokens = cached;
  r.http_status = 200;
  return r;
}

RequestResult Failed(double send, ErrorKind kind, std::string type) {
  RequestResult r;
  r.scheduled_s = send;
  r.send_s = send;
  r.e2e_s = 0.5;
  r.error = kind;
  r.error_type = std::move(type);
  return r;
}

TEST(TpotTest, DefinitionAndEdgeCases) {
  // (e2e - ttft) / (completion - 1) = (2.1 - 0.1) / 20.
  EXPECT_DOUBLE_EQ(*Tpot(Done(0, 0.1, 2.1, 21)), 0.1);
  EXPECT_FALSE(Tpot(Done(0, 0.1, 0.1, 1)).has_value());
  EXPECT_FALSE(Tpot(Failed(0, ErrorKind::kStream, "x")).has_value());
  SloSpec slo{0.5, 0.05};
  EXPECT_TRUE(MeetsSlo(Done(0, 0.5, 0.5, 1), slo));      // No TPOT: TTFT decides.
  EXPECT_FALSE(MeetsSlo(Done(0, 0.51, 0.51, 1), slo));   // TTFT miss.
  EXPECT_TRUE(MeetsSlo(Done(0, 0.1, 1.1, 21), slo));     // TPOT 0.05 exactly.
  EXPECT_FALSE(MeetsSlo(Done(0, 0.1, 1.3, 21), slo));    // TPOT 0.06.
  EXPECT_FALSE(MeetsSlo(Failed(0, ErrorKind::kHttp4xx, "rate_limit_error"), slo));
}

TEST(SummarizeTest, HandComputedAttainmentGoodputAndErrors) {
  SloSpec slo{1.0, 0.1};
  std::vector<RequestResult> rs = {
      Done(0.0, 0.2, 1.2, 11, 50),  // TPOT 0.1: meets.
      Done(1.0, 0.5, 2.5, 11, 0),   // TPOT 0.2: misses.
      Done(2.0, 1.5, 1.5, 1, 25),   // TTFT 1.5: misses.
      Done(3.0, 0.4, 7.0, 2, 0),    // TPOT 6.6: misses; ends last at 10.0.
      Failed(4.0, ErrorKind::kHttp4xx, "rate_limit_error"),
      Failed(5.0, ErrorKind::kTimeout, "timeout"),
  };
  rs[0].gaps_s = {0.1, 0.1};
  ReplaySummary s = Summarize(rs, slo);
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.completed, 4);
  EXPECT_EQ(s.errors, 2);
  EXPECT_EQ(s.slo_met, 1);
  EXPECT_DOUBLE_EQ(s.duration_s, 10.0);  // First send 0, last end 3 + 7.
  EXPECT_DOUBLE_EQ(s.throughput_rps, 0.4);
  EXPECT_DOUBLE_EQ(s.goodput_rps, 0.1);
  EXPECT_DOUBLE_EQ(s.slo_attainment, 1.0 / 6);
  EXPECT_DOUBLE_EQ(s.ttft.p50, 0.45);  // TTFTs 0.2 0.4 0.5 1.5.
  EXPECT_EQ(s.tpot.count, 3);          // The 1-token request has none.
  EXPECT_DOUBLE_EQ(s.tpot.p50, 0.2);   // TPOTs 0.1 0.2 6.6.
  EXPECT_NEAR(s.tpot.p90, 0.2 + 0.8 * 6.4, 1e-12);
  EXPECT_EQ(s.prefix_cached_tokens, 75);
  EXPECT_EQ(s.prompt_tokens, 400);
  EXPECT_EQ(s.completion_tokens, 25);
  EXPECT_EQ(s.itl.count, 2);
  EXPECT_EQ(s.errors_by_kind.at("http_4xx"), 1);
  EXPECT_EQ(s.errors_by_kind.at("timeout"), 1);
  EXPECT_EQ(s.errors_by_type.at("http_4xx:rate_limit_error"), 1);

  std::vector<AttainmentBucket> buckets = AttainmentOverTime(rs, slo, 2.0);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].requests, 2);
  EXPECT_EQ(buckets[0].met, 1);
  EXPECT_DOUBLE_EQ(buckets[2].start_s, 4.0);
  EXPECT_EQ(buckets[2].met, 0);
}

TEST(SummarizeTest, EmptyAndAllFailedAreWellDefined) {
  ReplaySummary empty = Summarize({}, {});
  EXPECT_EQ(empty.requests, 0);
  EXPECT_EQ(empty.slo_attainment, 0);
  EXPECT_EQ(empty.throughput_rps, 0);
  nlohmann::ordered_json j = SummaryJson(empty);
  EXPECT_TRUE(j["ttft_p50_s"].is_null());
}

TEST(WriteReportTest, WritesEveryFileWithTheRequiredKeys) {
  const std::string dir = ::testing::TempDir() + "/replay_report_test";
  std::filesystem::remove_all(dir);
  std::vector<RequestResult> rs = {Done(0.0, 0.2, 1.2, 11, 50),
                                   Failed(1.0, ErrorKind::kStream, "server_error")};
  ReplaySummary s = Summarize(rs, {1.0, 0.1});
  ASSERT_TRUE(WriteReport(dir, rs, s).ok());
  std::ifstream in(dir + "/summary.json");
  nlohmann::json j = nlohmann::json::parse(in);
  for (const char* key :
       {"requests", "completed", "errors", "throughput_rps", "slo_attainment", "goodput_rps",
        "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
        "prefix_cached_tokens"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["requests"], 2);
  EXPECT_EQ(j["prefix_cached_tokens"], 50);
  EXPECT_DOUBLE_EQ(j["slo_attainment"].get<double>(), 0.5);
  std::stringstream csv;
  csv << std::ifstream(dir + "/requests.csv").rdbuf();
  const std::string csv_text = csv.str();
  EXPECT_THAT(csv_text, HasSubstr("index,trace_line,scheduled_s"));
  EXPECT_EQ(std::count(csv_text.begin(), csv_text.end(), '\n'), 3);
  std::ifstream jsonl(dir + "/requests.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(jsonl, line)) {
    nlohmann::json r = nlohmann::json::parse(line);
    EXPECT_TRUE(r.contains("ttft_s"));
    ++lines;
  }
  EXPECT_EQ(lines, 2);
  for (const char* svg : {"ttft_cdf.svg", "tpot_cdf.svg", "attainment.svg"}) {
    std::stringstream text;
    text << std::ifstream(dir + "/" + svg).rdbuf();
    EXPECT_THAT(text.str(), HasSubstr("<svg")) << svg;
    EXPECT_THAT(text.str(), HasSubstr("</svg>")) << svg;
  }
}

TEST(SvgPlotTest, NiceTicksCoverTheRange) {
  EXPECT_THAT(NiceTicks(0, 1, 5), ElementsAre(0, 0.2, 0.4, 0.6000000000000001, 0.8, 1));
  std::vector<double> t = NiceTicks(0.013, 0.87, 8);
  EXPECT_LE(t.front(), 0.013);
  EXPECT_GE(t.back(), 0.87);
  EXPECT_LE(t.size(), 12u);
}

TEST(SvgPlotTest, RendersAxesLegendAndEscapes) {
  PlotSpec spec;
  spec.title = "TTFT <CDF>";
  spec.x_label = "seconds";
  spec.y_label = "fraction";
  spec.y_is_fraction = true;
  spec.series.push_back({"run A", {{0.1, 0.0}, {0.1, 0.5}, {0.3, 1.0}}, true});
  spec.references.push_back({true, 0.2, "SLO"});
  std::string svg = RenderLinePlot(spec);
  EXPECT_THAT(svg, HasSubstr("TTFT &lt;CDF&gt;"));
  EXPECT_THAT(svg, HasSubstr(">run A<"));
  EXPECT_THAT(svg, HasSubstr(">100%<"));
  EXPECT_THAT(svg, HasSubstr(">seconds<"));
  EXPECT_THAT(svg, HasSubstr("stroke-dasharray"));
  EXPECT_EQ(svg, RenderLinePlot(spec));  // Deterministic.
}

// A fake system whose attainment is 1 up to 10 req/s and 0 above: offered = speedup.
TEST(GoodputSearchTest, BracketsThenBisectsToTheThreshold) {
  std::vector<double> probed;
  auto evaluate = [&](double speedup) -> absl::StatusOr<GoodputPoint> {
    probed.push_back(speedup);
    const double att = speedup <= 10 ? 0.95 : 0.5;
    return GoodputPoint{speedup, speedup, att, att * speedup};
  };
  GoodputSearchOptions o;
  o.max_evaluations = 20;
  absl::StatusOr<GoodputSearchResult> r = FindGoodput(evaluate, o);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->best.has_value());
  EXPECT_LE(r->best->speedup, 10);
  EXPECT_GT(r->best->speedup, 10 / 1.05);
  EXPECT_THAT(std::vector<double>(probed.begin(), probed.begin() + 5),
              ElementsAre(1, 2, 4, 8, 16));
  EXPECT_TRUE(std::is_sorted(r->curve.begin(), r->curve.end(),
                             [](auto& a, auto& b) { return a.speedup < b.speedup; }));
  EXPECT_THAT(FormatGoodputCurve(*r, 0.9), HasSubstr("highest rate with >= 90% attainment"));
  EXPECT_THAT(GoodputPlotSvg(*r, 0.9), HasSubstr("90% target"));
}

TEST(GoodputSearchTest, NothingPassesAndErrorsPropagate) {
  int calls = 0;
  auto never = [&](double s) -> absl::StatusOr<GoodputPoint> {
    ++calls;
    return GoodputPoint{s, s, 0.0, 0.0};
  };
  GoodputSearchOptions o;
  o.min_speedup = 0.25;
  auto r = FindGoodput(never, o);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->best.has_value());
  EXPECT_EQ(calls, 3);  // 1, 0.5, 0.25.
  auto failing = [](double) -> absl::StatusOr<GoodputPoint> {
    return absl::UnavailableError("server down");
  };
  EXPECT_EQ(FindGoodput(failing).status().code(), absl::StatusCode::kUnavailable);
  o.initial = 0.1;  // Below min_speedup.
  EXPECT_EQ(FindGoodput(never, o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::replay
