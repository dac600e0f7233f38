// strata::replay: trace parsers, replay options and deterministic prompt synthesis.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/replay/prompt_synthesizer.h"
#include "strata/replay/trace.h"
#include "strata/replay/trace_options.h"

namespace strata::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kMooncake[] =
    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
    "\r\n"
    "{\"timestamp\": 1500, \"input_length\": 512, \"output_length\": 7, \"hash_ids\": [0]}\r\n"
    "{\"timestamp\": 1500.5, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": [],"
    " \"extra\": true}\n";

constexpr char kAzure[] =
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-17 00:00:00,10,0\n";

constexpr char kBurstGpt[] =
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,GPT-4,1087,0,1087,Conversation log\n"
    "118,\"ChatGPT, v2\",417,276,693,API log\n"
    "120,ChatGPT,10,20,30,Failure log\n";

constexpr char kStrata[] =
    "{\"arrival_s\": 0.25, \"input_tokens\": 700, \"output_tokens\": 64,"
    " \"block_hashes\": [17, 18], \"prompt\": \"hello\"}\n"
    "{\"arrival_s\": 1, \"input_tokens\": 3, \"output_tokens\": 2}\n";

// ---- valid inputs --------------------------------------------------------------------------

TEST(TraceParseTest, Mooncake) {
  ParseReport report;
  absl::StatusOr<std::vector<TraceRequest>> r = ParseMooncakeJsonl(kMooncake, &report);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(report.data_rows, 3);
  EXPECT_DOUBLE_EQ((*r)[0].arrival_s, 0.0);
  EXPECT_EQ((*r)[0].input_tokens, 600);
  EXPECT_EQ((*r)[0].output_tokens, 5);
  EXPECT_THAT((*r)[0].block_ids, ElementsAre(0u, 1u));
  EXPECT_EQ((*r)[0].line, 1);
  EXPECT_DOUBLE_EQ((*r)[1].arrival_s, 1.5);
  EXPECT_EQ((*r)[1].line, 3);  // Physical line numbers count the blank line.
  EXPECT_DOUBLE_EQ((*r)[2].arrival_s, 1.5005);
  EXPECT_TRUE((*r)[2].block_ids.empty());
}

TEST(TraceParseTest, AzureWithHeader) {
  absl::StatusOr<std::vector<TraceRequest>> r = ParseAzureCsv(kAzure);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_DOUBLE_EQ((*r)[0].arrival_s, 0.0);
  EXPECT_NEAR((*r)[1].arrival_s, 4.314579, 1e-9);
  // 18:15:46.68059 -> next midnight: 5 h 44 min 13.31941 s.
  EXPECT_NEAR((*r)[2].arrival_s, 5 * 3600 + 44 * 60 + 13.31941, 1e-9);
  EXPECT_EQ((*r)[1].input_tokens, 396);
  EXPECT_EQ((*r)[1].output_tokens, 109);
  EXPECT_EQ((*r)[2].line, 4);
  EXPECT_TRUE((*r)[0].block_ids.empty());
}

TEST(TraceParseTest, AzureHeaderlessAcrossYearAndZones) {
  absl::StatusOr<std::vector<TraceRequest>> r = ParseAzureCsv(
      "2023-12-31 23:59:59.5,1,2\n"
      "2024-01-01T00:00:00.25Z,3,4\n"
      "2024-01-01 01:00:01.25+01:00,5,6\n"
      "2024-02-29 00:00:00,7,8\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].line, 1);
  EXPECT_NEAR((*r)[1].arrival_s, 0.75, 1e-9);
  EXPECT_NEAR((*r)[2].arrival_s, 1.75, 1e-9);              // The +01:00 offset is removed.
  EXPECT_NEAR((*r)[3].arrival_s, 59 * 86400 + 0.5, 1e-6);  // 2024 is a leap year.
}

TEST(TraceParseTest, BurstGptSkipsFailedRows) {
  ParseReport report;
  absl::StatusOr<std::vector<TraceRequest>> r = ParseBurstGptCsv(kBurstGpt, {}, &report);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(report.data_rows, 4);
  EXPECT_EQ(report.failed_rows, 2);
  EXPECT_EQ(report.skipped_rows, 2);
  EXPECT_DOUBLE_EQ((*r)[0].arrival_s, 5.0);  // BurstGPT timestamps are kept, not rebased.
  EXPECT_EQ((*r)[0].input_tokens, 472);
  EXPECT_EQ((*r)[1].input_tokens, 417);  // The quoted model name holds a comma.
  EXPECT_EQ((*r)[1].line, 4);

  r = ParseBurstGptCsv(kBurstGpt, BurstGptOptions{.skip_failed = false}, &report);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 4u);
  EXPECT_EQ(report.failed_rows, 2);
  EXPECT_EQ(report.skipped_rows, 0);
  EXPECT_EQ((*r)[1].output_tokens, 0);
}

TEST(TraceParseTest, StrataAndRoundTrip) {
  absl::StatusOr<std::vector<TraceRequest>> r = ParseStrataJsonl(kStrata);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_DOUBLE_EQ((*r)[0].arrival_s, 0.25);
  EXPECT_THAT((*r)[0].block_ids, ElementsAre(17u, 18u));
  EXPECT_EQ((*r)[0].prompt, "hello");
  EXPECT_TRUE((*r)[1].block_ids.empty());
  EXPECT_TRUE((*r)[1].prompt.empty());

  TraceRequest original{.arrival_s = 0.1 + 0.2,
                        .input_tokens = 513,
                        .output_tokens = 9,
                        .block_ids = {UINT64_MAX, 3},
                        .prompt = "a \"quoted\"\nline"};
  std::string text = FormatStrataRecord(original) + "\n" + FormatStrataRecord(original);
  absl::StatusOr<std::vector<TraceRequest>> back = ParseStrataJsonl(text);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].arrival_s, original.arrival_s);  // Exact round trip.
  EXPECT_EQ((*back)[1].input_tokens, 513);
  EXPECT_EQ((*back)[1].output_tokens, 9);
  EXPECT_EQ((*back)[1].block_ids, original.block_ids);
  EXPECT_EQ((*back)[1].prompt, original.prompt);
  EXPECT_EQ((*back)[1].line, 2);
}

TEST(TraceParseTest, EmptyInputIsAnEmptyTrace) {
  for (TraceFormat format : {TraceFormat::kMooncake, TraceFormat::kAzure, TraceFormat::kBurstGpt,
                             TraceFormat::kStrata}) {
    absl::StatusOr<std::vector<TraceRequest>> r = ParseTrace(format, "\n  \n");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->empty());
  }
}

TEST(TraceParseTest, FormatNamesAndDetection) {
  for (TraceFormat format : {TraceFormat::kMooncake, TraceFormat::kAzure, TraceFormat::kBurstGpt,
                             TraceFormat::kStrata}) {
    absl::StatusOr<TraceFormat> parsed = ParseTraceFormatName(TraceFormatName(format));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, format);
  }
  EXPECT_FALSE(ParseTraceFormatName("csv").ok());
  EXPECT_EQ(*DetectTraceFormat("a.jsonl", kMooncake), TraceFormat::kMooncake);
  EXPECT_EQ(*DetectTraceFormat("a.jsonl", kStrata), TraceFormat::kStrata);
  EXPECT_EQ(*DetectTraceFormat("a.csv", kAzure), TraceFormat::kAzure);
  EXPECT_EQ(*DetectTraceFormat("a.csv", kBurstGpt), TraceFormat::kBurstGpt);
  EXPECT_EQ(*DetectTraceFormat("x", "2023-11-16 18:15:46,1,2\n"), TraceFormat::kAzure);
  EXPECT_EQ(*DetectTraceFormat("x", "1,m,2,3,5,API log\n"), TraceFormat::kBurstGpt);
  EXPECT_FALSE(DetectTraceFormat("x", "a,b\n").ok());
  EXPECT_FALSE(DetectTraceFormat("x.jsonl", "{\"foo\": 1}\n").ok());
  EXPECT_FALSE(DetectTraceFormat("x.csv", "").ok());
}

TEST(TraceParseTest, LoadTraceNamesThePath) {
  std::string path = ::testing::TempDir() + "/replay_test_bad.jsonl";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(
        "{\"arrival_s\": 1, \"input_tokens\": 1, \"output_tokens\": 1}\n{\"arrival_s\": 0,"
        " \"input_tokens\": 1, \"output_tokens\": 1}\n",
        f);
    std::fclose(f);
  }
  absl::StatusOr<std::vector<TraceRequest>> r = LoadTrace(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  EXPECT_THAT(r.status().message(), HasSubstr("strata line 2: arrival"));
  std::filesystem::remove(path);
  EXPECT_FALSE(LoadTrace(path).ok());
}

// ---- malformed inputs ----------------------------------------------------------------------

struct BadCase {
  TraceFormat format;
  std::string text;
  std::string message;  // Expected substring, including the line number.
};

constexpr char kMcOk[] =
    "{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n";
constexpr char kStOk[] = "{\"arrival_s\": 1, \"input_tokens\": 1, \"output_tokens\": 1}\n";

std::vector<BadCase> BadCases() {
  const TraceFormat mc = TraceFormat::kMooncake, az = TraceFormat::kAzure,
                    bg = TraceFormat::kBurstGpt, st = TraceFormat::kStrata;
  const std::string mc_ok = kMcOk, st_ok = kStOk;
  const std::string az_h = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const std::string az_ok = "2023-11-16 18:15:46.6805900,374,44\n";
  const std::string bg_h = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  const std::string bg_ok = "5,ChatGPT,472,18,490,Conversation log\n";
  return {
      {mc, mc_ok + "{\"timestamp\": 11,", "mooncake line 2: invalid JSON"},
      {mc, mc_ok + "\n[1, 2]\n", "mooncake line 3: expected a JSON object"},
      {mc, mc_ok + "{\"timestamp\": 11, \"x\": " + std::string(100000, '[') + "}",
       "mooncake line 2: JSON nested deeper than 128 levels"},
      {mc, "{\"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}",
       "mooncake line 1: missing field \"timestamp\""},
      {mc, mc_ok + "{\"timestamp\": 11, \"output_length\": 1, \"hash_ids\": [0]}",
       "line 2: missing field \"input_length\""},
      {mc, mc_ok + "{\"timestamp\": 11, \"input_length\": 1, \"hash_ids\": [0]}",
       "line 2: missing field \"output_length\""},
      {mc, mc_ok + "{\"timestamp\": 11, \"input_length\": 1, \"output_length\": 1}",
       "line 2: missing field \"hash_ids\""},
      {mc, "{\"timestamp\": \"0\", \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}",
       "line 1: field \"timestamp\" must be a number"},
      {mc, "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}",
       "line 1: field \"timestamp\" must be finite and >= 0"},
      {mc,
       mc_ok + "{\"timestamp\": 11, \"input_length\": -5, \"output_length\": 1, "
               "\"hash_ids\": []}",
       "line 2: field \"input_length\" is negative"},
      {mc, "{\"timestamp\": 1, \"input_length\": 1.5, \"output_length\": 1, \"hash_ids\": [0]}",
       "line 1: field \"input_length\" must be an integer"},
      {mc,
       "{\"timestamp\": 1, \"input_length\": 3000000000, \"output_length\": 1, "
       "\"hash_ids\": [0]}",
       "line 1: field \"input_length\" must be an integer below 2^31"},
      {mc, "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": true, \"hash_ids\": [0]}",
       "line 1: field \"output_length\" must be an integer"},
      {mc,
       mc_ok + "{\"timestamp\": 11, \"input_length\": 513, \"output_length\": 1, "
               "\"hash_ids\": [0]}",
       "mooncake line 2: hash_ids has 1 ids but ceil(513/512) = 2 blocks are expected"},
      {mc, "{\"timestamp\": 1, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0, 1]}",
       "line 1: hash_ids has 2 ids"},
      {mc, "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [-1]}",
       "line 1: field \"hash_ids\" must hold non-negative integers"},
      {mc, "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [\"a\"]}",
       "line 1: field \"hash_ids\" must hold non-negative integers"},
      {mc, "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 7}",
       "line 1: field \"hash_ids\" must be an array"},
      {mc,
       mc_ok + "{\"timestamp\": 9, \"input_length\": 1, \"output_length\": 1, "
               "\"hash_ids\": [0]}",
       "mooncake line 2: arrival 0.0090000 s is earlier than the previous row's 0.0100000 s"},
      {az, az_h + az_ok + "2023-11-16 18:15:47,1\n", "azure line 3: expected 3 columns, got 2"},
      {az, az_h + az_ok + "2023-11-16 18:15:47,1,2,3\n", "azure line 3: expected 3 columns"},
      {az, az_h + "2023-11-16 25:00:00,1,2\n", "azure line 2: bad timestamp"},
      {az, az_ok + "2023-11-16 18:15:47.12345678,1,2\n", "azure line 2: bad timestamp"},
      {az, az_ok + "2023-02-29 18:15:47,1,2\n", "azure line 2: bad timestamp"},
      {az, az_ok + "2023-11-16 18:15:47.,1,2\n", "azure line 2: bad timestamp"},
      {az, az_ok + "2023-11-16 18:15:47+1:00,1,2\n", "azure line 2: bad timestamp"},
      {az, az_ok + "16/11/2023 18:15:47,1,2\n", "azure line 2: bad timestamp"},
      {az, az_h + az_ok + "2023-11-16 18:15:47,abc,2\n",
       "azure line 3: ContextTokens \"abc\" is not an integer"},
      {az, az_h + az_ok + "2023-11-16 18:15:47,1,-2\n",
       "azure line 3: GeneratedTokens is negative (-2)"},
      {az, az_h + az_ok + "2023-11-16 18:15:46.6805899,1,2\n",
       "azure line 3: arrival -0.0000001 s is earlier than the previous row's 0.0000000 s"},
      {az, "TIME,Context,Generated\n" + az_ok, "azure line 1: unexpected header"},
      {az, az_ok + "\"2023-11-16 18:15:47,1,2\n", "azure line 2: unterminated quoted field"},
      {bg, bg_h + bg_ok + "6,ChatGPT,1,2,3\n", "burstgpt line 3: expected 6 columns, got 5"},
      {bg, bg_h + bg_ok + "abc,ChatGPT,1,2,3,API log\n", "burstgpt line 3: bad timestamp"},
      {bg, bg_h + "-1,ChatGPT,1,2,3,API log\n", "burstgpt line 2: bad timestamp"},
      {bg, bg_h + "nan,ChatGPT,1,2,3,API log\n", "burstgpt line 2: bad timestamp"},
      {bg, bg_h + bg_ok + "6,ChatGPT,-1,2,1,API log\n",
       "burstgpt line 3: Request tokens is negative"},
      {bg, bg_h + bg_ok + "6,ChatGPT,1,x,1,API log\n",
       "burstgpt line 3: Response tokens \"x\" is not an integer"},
      {bg, bg_h + bg_ok + "6,ChatGPT,1,2,3.5,API log\n",
       "burstgpt line 3: Total tokens \"3.5\" is not an integer"},
      {bg, bg_h + bg_ok + "4,ChatGPT,1,2,3,API log\n", "burstgpt line 3: arrival 4.0000000 s"},
      {bg, "Timestamp,Model,Request tokens\n", "burstgpt line 1: unexpected header"},
      {st, st_ok + "{\"input_tokens\": 1, \"output_tokens\": 1}",
       "strata line 2: missing field \"arrival_s\""},
      {st, st_ok + "\n\n{\"arrival_s\": 2, \"input_tokens\": 1, \"output_tokens\": \"1\"}",
       "strata line 4: field \"output_tokens\" must be an integer"},
      {st, "{\"arrival_s\": 2, \"input_tokens\": 1, \"output_tokens\": 1, \"prompt\": 5}",
       "strata line 1: field \"prompt\" must be a string"},
      {st,
       "{\"arrival_s\": 2, \"input_tokens\": 1025, \"output_tokens\": 1, "
       "\"block_hashes\": [1, 2]}",
       "strata line 1: block_hashes has 2 ids but ceil(1025/512) = 3"},
      {st, "{\"arrival_s\": 2, \"input_tokens\": 1, \"output_tokens\": 1, \"block_hashes\": {}}",
       "strata line 1: field \"block_hashes\" must be an array"},
      {st, st_ok + "{\"arrival_s\": 0.5, \"input_tokens\": 1, \"output_tokens\": 1}",
       "strata line 2: arrival 0.5000000 s is earlier"},
      {st, "not json", "strata line 1: invalid JSON"},
  };
}

TEST(TraceParseTest, MalformedInputsNameLineAndReason) {
  for (const BadCase& c : BadCases()) {
    absl::StatusOr<std::vector<TraceRequest>> r = ParseTrace(c.format, c.text);
    ASSERT_FALSE(r.ok()) << TraceFormatName(c.format) << ": " << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.text;
  }
}

// ---- replay options ------------------------------------------------------------------------

std::vector<TraceRequest> TenRequests() {
  std::vector<TraceRequest> requests;
  for (int i = 0; i < 10; ++i) {
    requests.push_back({.arrival_s = static_cast<double>(i),
                        .input_tokens = 300 * i,
                        .output_tokens = 100,
                        .line = i + 1});
  }
  return requests;
}

TEST(TraceOptionsTest, DefaultsKeepEverything) {
  TraceSummary summary;
  absl::StatusOr<std::vector<TraceRequest>> r = ApplyTraceOptions(TenRequests(), {}, &summary);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 10u);
  EXPECT_EQ(summary.input_requests, 10);
  EXPECT_EQ(summary.output_requests, 10);
  EXPECT_EQ(summary.input_tokens, 300 * 45);
  EXPECT_EQ(summary.output_tokens, 1000);
  EXPECT_DOUBLE_EQ(summary.span_s, 9.0);
}

TEST(TraceOptionsTest, WindowSpeedupAndMaxRequests) {
  TraceSummary summary;
  absl::StatusOr<std::vector<TraceRequest>> r =
      ApplyTraceOptions(TenRequests(), {.start_s = 2, .duration_s = 5, .speedup = 2.0}, &summary);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 5u);  // Arrivals 2..6; 7 is outside [2, 7).
  EXPECT_EQ(summary.outside_window, 5);
  EXPECT_DOUBLE_EQ((*r)[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ((*r)[1].arrival_s, 0.5);
  EXPECT_DOUBLE_EQ((*r)[4].arrival_s, 2.0);
  EXPECT_EQ((*r)[0].line, 3);
  EXPECT_DOUBLE_EQ(summary.span_s, 2.0);

  r = ApplyTraceOptions(TenRequests(), {.start_s = 1, .max_requests = 3, .speedup = 0.5}, &summary);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_DOUBLE_EQ((*r)[2].arrival_s, 4.0);  // (3 - 1) / 0.5.
  EXPECT_EQ(summary.outside_window, 1);
  EXPECT_EQ(summary.over_limit, 6);
  EXPECT_EQ(summary.output_requests, 3);
}

TEST(TraceOptionsTest, ClipSkip) {
  TraceSummary summary;
  absl::StatusOr<std::vector<TraceRequest>> r =
      ApplyTraceOptions(TenRequests(), {.max_model_len = 1000}, &summary);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 4u);  // 0, 300, 600, 900 input tokens fit with 100 output.
  EXPECT_EQ(summary.skipped, 6);
  EXPECT_EQ(summary.clipped, 0);
  EXPECT_EQ(r->back().input_tokens, 900);
}

TEST(TraceOptionsTest, ClipTruncateInput) {
  std::vector<TraceRequest> requests = {
      {.arrival_s = 0,
       .input_tokens = 1500,
       .output_tokens = 100,
       .block_ids = {1, 2, 3},
       .prompt = "text"},
      {.arrival_s = 1, .input_tokens = 10, .output_tokens = 1000},  // Output alone too long.
      {.arrival_s = 2, .input_tokens = 900, .output_tokens = 100, .block_ids = {4, 5}},
  };
  TraceSummary summary;
  absl::StatusOr<std::vector<TraceRequest>> r = ApplyTraceOptions(
      requests, {.max_model_len = 1000, .clip_policy = ClipPolicy::kTruncateInput}, &summary);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(summary.clipped, 1);
  EXPECT_EQ(summary.skipped, 1);
  EXPECT_EQ((*r)[0].input_tokens, 900);
  EXPECT_THAT((*r)[0].block_ids, ElementsAre(1u, 2u));
  EXPECT_TRUE((*r)[0].prompt.empty());
  EXPECT_EQ((*r)[1].input_tokens, 900);  // Exactly max_model_len: untouched.
  EXPECT_EQ(summary.input_tokens, 1800);
}

TEST(TraceOptionsTest, RejectsBadOptions) {
  const std::vector<TraceOptions> bad = {
      {.start_s = -1},       {.duration_s = 0},     {.max_requests = -1}, {.speedup = 0},
      {.speedup = INFINITY}, {.max_model_len = -1}, {.duration_s = NAN}};
  for (const TraceOptions& options : bad) {
    absl::StatusOr<std::vector<TraceRequest>> r = ApplyTraceOptions(TenRequests(), options);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// ---- prompt synthesis ----------------------------------------------------------------------

constexpr int32_t kVocab = 32000;
const std::vector<int32_t> kReserved = {0, 1, 2, 31999};

PromptSynthesizer MakeSynth(uint64_t seed = 7, int32_t system_prompt = 0) {
  absl::StatusOr<PromptSynthesizer> s =
      PromptSynthesizer::Create(kVocab, kReserved, seed, system_prompt);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
         a.begin();
}

TEST(PromptSynthesizerTest, GoldenTokensAreStable) {
  // Pinned so that a change to the hash layout (which would break cross-process and
  // cross-version prefix sharing) fails here. Cross-checked with Python's xxhash package:
  // allowed[(xxh3_64(b"B" + le64(block_id) + le64(position), seed) * len(allowed)) >> 64].
  std::vector<int32_t> block = MakeSynth(42).BlockTokens(0);
  EXPECT_THAT(std::vector<int32_t>(block.begin(), block.begin() + 4),
              ElementsAre(28455, 31711, 27567, 17247));
}

TEST(PromptSynthesizerTest, DeterministicAcrossInstances) {
  PromptSynthesizer a = MakeSynth(), b = MakeSynth();
  EXPECT_EQ(a.BlockTokens(12345), b.BlockTokens(12345));
  EXPECT_EQ(a.BlockTokens(12345), a.BlockTokens(12345));
  EXPECT_EQ(a.BlockTokens(12345).size(), static_cast<size_t>(kTraceBlockTokens));
  EXPECT_NE(a.BlockTokens(12345), a.BlockTokens(12346));
  EXPECT_NE(a.BlockTokens(12345), MakeSynth(8).BlockTokens(12345));
  EXPECT_EQ(*a.UniquePrompt(3, 700), *b.UniquePrompt(3, 700));
}

// Two processes (a forked child, separate address space and heap) synthesize the same tokens
// for the same block ids: what lets two replay clients share prefixes in one cluster.
TEST(PromptSynthesizerTest, IdenticalBlocksInTwoProcesses) {
  const std::vector<uint64_t> ids = {7, 123456789, 0, 42};
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::vector<int32_t> tokens = *MakeSynth().BlockPrompt(ids, 4 * kTraceBlockTokens - 100);
    const char* p = reinterpret_cast<const char*>(tokens.data());
    size_t left = tokens.size() * sizeof(int32_t);
    while (left > 0) {
      const ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) ::_exit(2);
      p += n;
      left -= size_t(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<int32_t> theirs(4 * kTraceBlockTokens - 100);
  char* p = reinterpret_cast<char*>(theirs.data());
  size_t left = theirs.size() * sizeof(int32_t);
  while (left > 0) {
    const ssize_t n = ::read(fds[0], p, left);
    ASSERT_GT(n, 0);
    p += n;
    left -= size_t(n);
  }
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(theirs, *MakeSynth().BlockPrompt(ids, 4 * kTraceBlockTokens - 100));
}

TEST(PromptSynthesizerTest, SharedBlockIdsShareExactlyThatPrefix) {
  PromptSynthesizer s = MakeSynth();
  const std::vector<uint64_t> a_ids = {0, 1, 2, 3}, b_ids = {0, 1, 9};
  std::vector<int32_t> a = *s.BlockPrompt(a_ids, 1800);
  std::vector<int32_t> b = *s.BlockPrompt(b_ids, 1100);
  ASSERT_EQ(a.size(), 1800u);
  ASSERT_EQ(b.size(), 1100u);
  EXPECT_EQ(CommonPrefix(a, b), 1024u);
  int differing = 0;
  for (size_t i = 1024; i < 1100; ++i) differing += a[i] != b[i];
  EXPECT_GE(differing, 70);
  // The last block is the block truncated to input_tokens.
  std::vector<int32_t> block3 = s.BlockTokens(3);
  EXPECT_TRUE(std::equal(a.begin() + 1536, a.end(), block3.begin()));
  std::vector<int32_t> block0 = s.BlockTokens(0);
  EXPECT_TRUE(std::equal(block0.begin(), block0.end(), a.begin()));
  // A request whose ids are a prefix of another's is that request's prefix.
  std::vector<int32_t> c = *s.BlockPrompt(std::vector<uint64_t>{0, 1}, 1000);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
  // No shared first id: nothing shared.
  EXPECT_EQ(CommonPrefix(a, *s.BlockPrompt(std::vector<uint64_t>{5, 1}, 600)) < 512, true);
}

TEST(PromptSynthesizerTest, BlockPromptChecksCounts) {
  PromptSynthesizer s = MakeSynth();
  EXPECT_FALSE(s.BlockPrompt(std::vector<uint64_t>{1}, 513).ok());
  EXPECT_FALSE(s.BlockPrompt(std::vector<uint64_t>{1, 2}, 512).ok());
  EXPECT_FALSE(s.BlockPrompt(std::vector<uint64_t>{}, -1).ok());
  EXPECT_TRUE(s.BlockPrompt(std::vector<uint64_t>{}, 0)->empty());
  EXPECT_FALSE(s.UniquePrompt(0, -1).ok());
}

TEST(PromptSynthesizerTest, AvoidsReservedIdsAndCoversTheRest) {
  absl::StatusOr<PromptSynthesizer> s = PromptSynthesizer::Create(16, {0, 1, 2, 15, 2}, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  std::set<int32_t> seen;
  for (uint64_t id = 0; id < 8; ++id) {
    for (int32_t t : s->BlockTokens(id)) seen.insert(t);
  }
  std::vector<int32_t> unique = *s->UniquePrompt(5, 2000);
  seen.insert(unique.begin(), unique.end());
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(*seen.begin(), 3);
  EXPECT_EQ(*seen.rbegin(), 14);

  absl::StatusOr<PromptSynthesizer> one = PromptSynthesizer::Create(3, {0, 2}, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(*one->UniquePrompt(0, 3), ElementsAre(1, 1, 1));
}

TEST(PromptSynthesizerTest, RejectsBadConfig) {
  EXPECT_FALSE(PromptSynthesizer::Create(0, {}, 1).ok());
  EXPECT_FALSE(PromptSynthesizer::Create((1 << 24) + 1, {}, 1).ok());
  EXPECT_FALSE(PromptSynthesizer::Create(10, {10}, 1).ok());
  EXPECT_FALSE(PromptSynthesizer::Create(10, {-1}, 1).ok());
  EXPECT_FALSE(PromptSynthesizer::Create(2, {0, 1}, 1).ok());
  EXPECT_FALSE(PromptSynthesizer::Create(10, {}, 1, -1).ok());
}

TEST(PromptSynthesizerTest, UniquePromptsWithSystemPrefix) {
  PromptSynthesizer s = MakeSynth(7, 100);
  std::vector<int32_t> a = *s.UniquePrompt(0, 600), b = *s.UniquePrompt(1, 400);
  ASSERT_EQ(a.size(), 600u);
  EXPECT_GE(CommonPrefix(a, b), 100u);
  EXPECT_LT(CommonPrefix(a, b), 103u);
  int differing = 0;
  for (size_t i = 100; i < 400; ++i) differing += a[i] != b[i];
  EXPECT_GE(differing, 290);
  std::vector<int32_t> short_prompt = *s.UniquePrompt(2, 50);
  EXPECT_TRUE(std::equal(short_prompt.begin(), short_prompt.end(), a.begin()));

  PromptSynthesizer plain = MakeSynth(7, 0);
  EXPECT_LT(CommonPrefix(*plain.UniquePrompt(0, 300), *plain.UniquePrompt(1, 300)), 3u);
  // Synthesize picks blocks when the request has ids, the unique path otherwise.
  TraceRequest with_ids{.input_tokens = 600, .block_ids = {4, 5}};
  EXPECT_EQ(*s.Synthesize(with_ids, 9), *s.BlockPrompt(with_ids.block_ids, 600));
  TraceRequest without{.input_tokens = 600};
  EXPECT_EQ(*s.Synthesize(without, 0), a);
}

// ---- fuzz ----------------------------------------------------------------------------------

std::string Mutate(std::string text, std::mt19937_64& rng) {
  static constexpr char kInteresting[] = "{}[]\",:-.0123456789eE \n\r\tTZ+";
  int mutations = 1 + static_cast<int>(rng() % 4);
  for (int m = 0; m < mutations && !text.empty(); ++m) {
    size_t pos = rng() % text.size();
    char c = rng() % 2 ? kInteresting[rng() % (sizeof(kInteresting) - 1)]
                       : static_cast<char>(rng() % 256);
    switch (rng() % 3) {
      case 0:
        text[pos] = c;
        break;
      case 1:
        text.insert(text.begin() + pos, c);
        break;
      default:
        text.erase(pos, 1 + rng() % 8);
    }
  }
  return text;
}

void CheckInvariants(TraceFormat format, const std::vector<TraceRequest>& requests) {
  double previous = 0;
  for (const TraceRequest& r : requests) {
    ASSERT_GE(r.arrival_s, previous);
    ASSERT_TRUE(std::isfinite(r.arrival_s));
    ASSERT_GE(r.input_tokens, 0);
    ASSERT_GE(r.output_tokens, 0);
    ASSERT_GT(r.line, 0);
    if (format == TraceFormat::kMooncake || !r.block_ids.empty()) {
      ASSERT_EQ(r.block_ids.size(), (static_cast<size_t>(r.input_tokens) + 511) / 512);
    }
    previous = r.arrival_s;
  }
}

TEST(TraceFuzzTest, RandomMutationsNeverCrash) {
  const std::vector<std::pair<TraceFormat, std::string>> seeds = {
      {TraceFormat::kMooncake, kMooncake},
      {TraceFormat::kAzure, kAzure},
      {TraceFormat::kBurstGpt, kBurstGpt},
      {TraceFormat::kStrata, kStrata}};
  PromptSynthesizer synth = MakeSynth();
  std::mt19937_64 rng(20261130);
  int parsed_ok = 0, rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto& [format, text] = seeds[i % seeds.size()];
    std::string mutated = Mutate(text, rng);
    (void)DetectTraceFormat("fuzz", mutated);
    absl::StatusOr<std::vector<TraceRequest>> r = ParseTrace(format, mutated);
    if (!r.ok()) {
      ++rejected;
      ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
      ASSERT_THAT(r.status().message(), HasSubstr(" line ")) << r.status();
      continue;
    }
    ++parsed_ok;
    ASSERT_NO_FATAL_FAILURE(CheckInvariants(format, *r));
    TraceSummary summary;
    absl::StatusOr<std::vector<TraceRequest>> clipped = ApplyTraceOptions(
        *r, {.max_model_len = 600, .clip_policy = ClipPolicy::kTruncateInput}, &summary);
    ASSERT_TRUE(clipped.ok());
    for (const TraceRequest& request : *clipped) {
      if (request.input_tokens > 4096) continue;  // Keep the loop fast.
      ASSERT_TRUE(synth.Synthesize(request, 0).ok());
    }
  }
  // Both outcomes must occur, or the mutations are not exercising the parsers.
  EXPECT_GT(parsed_ok, 100);
  EXPECT_GT(rejected, 1000);
}

// ---- the shipped public traces (skipped when ../shared/traces is absent) -------------------

std::string SharedTrace(const char* name) {
  return std::string(STRATA_SOURCE_DIR) + "/../shared/traces/" + name;
}

TEST(SharedTraceTest, MooncakeConversation) {
  const std::string path = SharedTrace("mooncake_conversation.jsonl");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  absl::StatusOr<std::vector<TraceRequest>> r = LoadTrace(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 12031u);
  TraceSummary summary;
  ASSERT_TRUE(ApplyTraceOptions(*r, {}, &summary).ok());
  EXPECT_NEAR(static_cast<double>(summary.input_tokens) / 12031, 12035.06, 0.5);
  EXPECT_NEAR(static_cast<double>(summary.output_tokens) / 12031, 342.62, 0.5);
  EXPECT_NEAR(summary.span_s, 3536.999, 1e-6);
  // The first two requests share hash id 0 and hence exactly their first 512 tokens.
  PromptSynthesizer s = MakeSynth();
  std::vector<int32_t> a = *s.Synthesize((*r)[0], 0), b = *s.Synthesize((*r)[1], 1);
  EXPECT_EQ(CommonPrefix(a, b), 512u);
}

TEST(SharedTraceTest, AzureConversation2023) {
  const std::string path = SharedTrace("azure_conv_2023.csv");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  absl::StatusOr<std::vector<TraceRequest>> r = LoadTrace(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 19366u);
  EXPECT_EQ(r->front().input_tokens, 374);
  // 18:15:46.6805900 -> 19:14:08.4025270.
  EXPECT_NEAR(r->back().arrival_s, 58 * 60 + 21.721937, 1e-6);
  EXPECT_EQ(r->back().line, 19367);
}

}  // namespace
}  // namespace strata::replay
