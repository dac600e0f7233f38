// The conformance suite at work: the CPU plugin against the independent naive reference, and
// the suite's own ability to fail: deliberately broken tables (the naive table with one entry
// swapped for a wrong one) must fail exactly the cases that exercise the broken behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "strata/plugin/conformance.h"
#include "strata/plugin/naive_plugin.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Backend> MakeBackend(absl::StatusOr<std::shared_ptr<Plugin>> plugin,
                                     const std::string& config = "") {
  EXPECT_TRUE(plugin.ok()) << plugin.status();
  if (!plugin.ok()) return nullptr;
  auto backend = Backend::Create(*plugin, config);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

std::unique_ptr<Backend> NaiveBackend(const std::string& config = "") {
  return MakeBackend(NaivePlugin(), config);
}

ConformanceReport RunSuite(Backend& candidate, Backend& reference,
                           ConformanceOptions options = {}) {
  auto report = RunConformance(candidate, reference, options);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : ConformanceReport{};
}

std::string Describe(const CaseResult& c) {
  return c.op + " / " + c.name + ": error " + std::to_string(c.max_error) + " (tolerance " +
         std::to_string(c.tolerance) + ") " + c.error;
}

TEST(CpuConformanceTest, EveryCasePassesAgainstTheNaiveReference) {
  auto cpu = MakeBackend(Plugin::Load(STRATA_BINARY_DIR "/bin/libstrata_cpu.so"));
  auto naive = NaiveBackend();
  ASSERT_TRUE(cpu && naive);
  const ConformanceReport report = RunSuite(*cpu, *naive);
  EXPECT_GT(report.cases.size(), 50u);
  // Skipped: only cases of optional entries the CPU plugin lacks (its copies need no
  // page-locked host memory, so it has no host_register).
  for (const CaseResult& c : report.cases) {
    const bool lacks_entry =
        !cpu->plugin().has_moe() || c.error.find("host_register") != std::string::npos;
    EXPECT_TRUE(c.passed || (c.skipped && lacks_entry)) << Describe(c);
  }
  EXPECT_EQ(report.num_failed(), 0);
  // The token-mask cases ran (the CPU plugin has the entry), the masked sampling among them.
  int masks = 0, masked_sampling = 0;
  for (const CaseResult& c : report.cases) {
    if (c.op != "mask_logits") continue;
    EXPECT_TRUE(c.passed) << Describe(c);
    ++masks;
    masked_sampling += c.name.starts_with("then sample") ? 1 : 0;
  }
  EXPECT_GE(masks, 7);
  EXPECT_GE(masked_sampling, 3);
}

TEST(ConformanceSuiteTest, NaiveMatchesItselfExactly) {
  auto a = NaiveBackend(), b = NaiveBackend();
  const ConformanceReport report = RunSuite(*a, *b);
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    EXPECT_TRUE(c.passed) << Describe(c);
    EXPECT_EQ(c.max_error, 0.0) << Describe(c);
    EXPECT_EQ(c.tolerance, ConformanceOptions{}.f32_tolerance);
  }
  // Every op of the ABI is covered, MoE included.
  std::vector<std::string> ops;
  for (const CaseResult& c : report.cases) {
    if (ops.empty() || ops.back() != c.op) ops.push_back(c.op);
  }
  EXPECT_EQ(ops, ConformanceOps());
}

// A bf16 candidate gets inputs rounded to bf16 (the reference gets the same rounded values)
// and is judged with the half-precision tolerance.
TEST(ConformanceSuiteTest, Bf16CandidatePassesAtTheHalfTolerance) {
  auto bf16 = NaiveBackend(R"({"dtype":"bf16"})");
  auto f32 = NaiveBackend();
  ASSERT_EQ(bf16->info().act_dtype, STRATA_DTYPE_BF16);
  const ConformanceReport report = RunSuite(*bf16, *f32);
  double worst = 0;
  for (const CaseResult& c : report.cases) {
    EXPECT_TRUE(c.passed) << Describe(c);
    // copy_runs moves raw bytes (I32 arrays): nothing is rounded, the f32 tolerance holds.
    const ConformanceOptions defaults;
    EXPECT_EQ(c.tolerance, c.op == "copy_runs" ? defaults.f32_tolerance : defaults.half_tolerance);
    worst = std::max(worst, c.max_error);
  }
  // Outputs really are stored in bf16: the error is that of one bf16 rounding.
  EXPECT_GT(worst, 1e-4);
  EXPECT_LT(worst, 1e-2);
}

TEST(ConformanceSuiteTest, HalfRoundingFailsATightTolerance) {
  auto f16 = NaiveBackend(R"({"dtype":"f16"})");
  auto f32 = NaiveBackend();
  ConformanceOptions options;
  options.half_tolerance = options.f32_tolerance * 1e-3;
  options.ops = {"gemm", "kv_copy_blocks"};
  const ConformanceReport report = RunSuite(*f16, *f32, options);
  for (const CaseResult& c : report.cases) {
    // Copies are exact in any dtype; a rounded gemm output is not.
    if (c.op == "kv_copy_blocks") {
      EXPECT_TRUE(c.passed) << Describe(c);
    } else if (c.name.find("rejects") == std::string::npos) {
      EXPECT_FALSE(c.passed) << Describe(c);
    }
  }
}

// --- deliberately broken plugins ----------------------------------------------------------
// The naive backend's device memory is host memory and, by default, f32: the broken entries
// below work on it directly.

const strata_plugin_api_v1& Naive() { return *NaivePluginApi(); }

float* Row(const strata_tensor& t, int64_t row) {
  int64_t elems = 1;
  for (int i = 1; i < t.ndim; ++i) elems *= t.shape[i];
  return static_cast<float*>(t.data) + row * (t.row_stride ? t.row_stride : elems);
}

// GPT-J (interleaved) pairing instead of the ABI's rotate-half pairing.
void RotateInterleaved(const strata_tensor& x, const strata_tensor& positions,
                       const strata_tensor& inv_freq, float mscale) {
  const auto* pos = static_cast<const int32_t*>(positions.data);
  const auto* freq = static_cast<const float*>(inv_freq.data);
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    for (int64_t h = 0; h < x.shape[1]; ++h) {
      float* v = Row(x, t) + h * x.shape[2];
      for (int64_t i = 0; i < inv_freq.shape[0]; ++i) {
        const float angle = static_cast<float>(pos[t]) * freq[i];
        const float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = mscale * (a * std::cos(angle) - b * std::sin(angle));
        v[2 * i + 1] = mscale * (b * std::cos(angle) + a * std::sin(angle));
      }
    }
  }
}

strata_status InterleavedRope(strata_backend, strata_stream, strata_tensor* q, strata_tensor* k,
                              const strata_tensor* positions, const strata_tensor* inv_freq,
                              float mscale) {
  RotateInterleaved(*q, *positions, *inv_freq, mscale);
  if (k != nullptr) RotateInterleaved(*k, *positions, *inv_freq, mscale);
  return STRATA_OK;
}

strata_status GemmIgnoringBias(strata_backend b, strata_stream s, const strata_tensor* x,
                               const strata_tensor* w, const strata_tensor*, int32_t accumulate,
                               strata_tensor* out) {
  return Naive().gemm(b, s, x, w, nullptr, accumulate, out);
}

// Accepts any shapes: an op that does not validate its arguments.
strata_status GemmWithoutChecks(strata_backend b, strata_stream s, const strata_tensor* x,
                                const strata_tensor* w, const strata_tensor* bias,
                                int32_t accumulate, strata_tensor* out) {
  if (x->shape[1] != w->shape[1]) return STRATA_OK;
  return Naive().gemm(b, s, x, w, bias, accumulate, out);
}

// Every query row attends to its sequence's whole context: causality ignored.
strata_status NonCausalPrefill(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                               const strata_attention_batch* batch,
                               const strata_attention_params* params, const strata_tensor* q,
                               strata_tensor* out) {
  for (int32_t seq = 0; seq < batch->num_seqs; ++seq) {
    for (int32_t row = batch->q_start[seq]; row < batch->q_start[seq + 1]; ++row) {
      const int32_t q_start[2] = {0, 1};
      const strata_attention_batch one{1,
                                       batch->max_blocks_per_seq,
                                       1,
                                       batch->kv_len[seq],
                                       q_start,
                                       &batch->kv_len[seq],
                                       batch->block_tables + seq * batch->max_blocks_per_seq};
      strata_tensor q_row = MakeTensor(Row(*q, row), q->dtype, {1, q->shape[1], q->shape[2]});
      strata_tensor o_row =
          MakeTensor(Row(*out, row), out->dtype, {1, out->shape[1], out->shape[2]});
      const strata_status st = Naive().attention_decode(b, s, cache, &one, params, &q_row, &o_row);
      if (st != STRATA_OK) return st;
    }
  }
  return STRATA_OK;
}

strata_status PrefillIgnoringWindow(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                                    const strata_attention_batch* batch,
                                    const strata_attention_params* params, const strata_tensor* q,
                                    strata_tensor* out) {
  strata_attention_params full = *params;
  full.sliding_window = 0;
  return Naive().attention_prefill(b, s, cache, batch, &full, q, out);
}

strata_status DecodeIgnoringWindow(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                                   const strata_attention_batch* batch,
                                   const strata_attention_params* params, const strata_tensor* q,
                                   strata_tensor* out) {
  strata_attention_params full = *params;
  full.sliding_window = 0;
  return Naive().attention_decode(b, s, cache, batch, &full, q, out);
}

strata_status UnsupportedSiluMul(strata_backend, strata_stream, const strata_tensor*,
                                 strata_tensor*) {
  return STRATA_ERR_UNSUPPORTED;
}

// Copies the runs one by one, checking each as it comes: a bad run late in the list finds the
// earlier ones already written.
strata_status CopyRunsCheckingLate(strata_backend b, strata_stream s, void* dst, const void* src,
                                   const strata_copy_run* runs, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const strata_status st = Naive().copy_runs(b, s, dst, src, runs + i, 1);
    if (st != STRATA_OK) return st;
  }
  return n < 0 ? Naive().copy_runs(b, s, dst, src, runs, n) : STRATA_OK;
}

// Leaves out the last run.
strata_status CopyRunsDroppingTheLast(strata_backend b, strata_stream s, void* dst,
                                      const void* src, const strata_copy_run* runs, int64_t n) {
  return Naive().copy_runs(b, s, dst, src, runs, n > 1 ? n - 1 : n);
}

// Applies only the last mask listed for a row (a row listed twice should keep what both allow).
strata_status MaskLogitsLastWins(strata_backend b, strata_stream s, strata_tensor* logits,
                                 const strata_tensor* rows, const strata_tensor* masks) {
  const auto* ids = static_cast<const int32_t*>(rows->data);
  const int64_t n = rows->shape[0], words = masks->shape[1];
  for (int64_t i = 0; i < n; ++i) {
    bool later = false;
    for (int64_t j = i + 1; j < n; ++j) later = later || ids[j] == ids[i];
    if (later) continue;
    strata_tensor one_row = MakeTensor(const_cast<int32_t*>(ids + i), STRATA_DTYPE_I32, {1});
    strata_tensor one_mask = MakeTensor(static_cast<int32_t*>(masks->data) + i * words,
                                        STRATA_DTYPE_I32, {1, words});
    const strata_status st = Naive().mask_logits(b, s, logits, &one_row, &one_mask);
    if (st != STRATA_OK) return st;
  }
  return STRATA_OK;
}

// Masks the bits of each word in the wrong order (bit 31 - v % 32 for token v).
strata_status MaskLogitsBitsReversed(strata_backend b, strata_stream s, strata_tensor* logits,
                                     const strata_tensor* rows, const strata_tensor* masks) {
  std::vector<int32_t> reversed(static_cast<int32_t*>(masks->data),
                                static_cast<int32_t*>(masks->data) + masks->shape[0] * masks->shape[1]);
  for (int32_t& w : reversed) {
    uint32_t v = static_cast<uint32_t>(w), r = 0;
    for (int bit = 0; bit < 32; ++bit) r |= ((v >> bit) & 1u) << (31 - bit);
    w = static_cast<int32_t>(r);
  }
  strata_tensor m = *masks;
  m.data = reversed.data();
  return Naive().mask_logits(b, s, logits, rows, &m);
}

class BrokenPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ = Naive();
    reference_ = NaiveBackend();
  }

  // Runs `ops` of the suite with the modified table as the candidate.
  ConformanceReport RunBroken(std::vector<std::string> ops) {
    auto candidate = MakeBackend(Plugin::FromTable(&table_, "broken"));
    if (!candidate) return {};
    ConformanceOptions options;
    options.ops = std::move(ops);
    return RunSuite(*candidate, *reference_, options);
  }

  strata_plugin_api_v1 table_;
  std::unique_ptr<Backend> reference_;
};

TEST_F(BrokenPluginTest, WrongRopePairingFailsEveryRopeCase) {
  table_.rope = InterleavedRope;
  const ConformanceReport report = RunBroken({"rope", "gemm"});
  int rope_cases = 0;
  for (const CaseResult& c : report.cases) {
    if (c.op == "rope") {
      ++rope_cases;
      EXPECT_FALSE(c.passed) << Describe(c);
      EXPECT_GT(c.max_error, 0.01) << Describe(c);
      EXPECT_THAT(c.error, HasSubstr("worst at"));
    } else {
      EXPECT_TRUE(c.passed) << Describe(c);
    }
  }
  EXPECT_GE(rope_cases, 5);
  EXPECT_EQ(report.num_failed(), rope_cases);
}

TEST_F(BrokenPluginTest, IgnoredBiasFailsExactlyTheBiasCases) {
  table_.gemm = GemmIgnoringBias;
  const ConformanceReport report = RunBroken({"gemm"});
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    const bool has_bias = c.name.find("bias") != std::string::npos;
    EXPECT_EQ(c.passed, !has_bias) << Describe(c);
  }
}

TEST_F(BrokenPluginTest, MissingArgumentChecksFailTheNegativeCase) {
  table_.gemm = GemmWithoutChecks;
  const ConformanceReport report = RunBroken({"gemm"});
  for (const CaseResult& c : report.cases) {
    const bool negative = c.name == "rejects mismatched K";
    EXPECT_EQ(c.passed, !negative) << Describe(c);
    if (negative) {
      EXPECT_THAT(c.error, HasSubstr("expected error code 1, got 0"));
    }
  }
}

TEST_F(BrokenPluginTest, NonCausalPrefillFailsEveryPrefillCase) {
  table_.attention_prefill = NonCausalPrefill;
  const ConformanceReport report = RunBroken({"attention_prefill", "attention_decode"});
  int prefill_cases = 0;
  for (const CaseResult& c : report.cases) {
    const bool prefill = c.op == "attention_prefill";
    prefill_cases += prefill ? 1 : 0;
    EXPECT_EQ(c.passed, !prefill) << Describe(c);
  }
  EXPECT_GE(prefill_cases, 5);
}

TEST_F(BrokenPluginTest, IgnoredSlidingWindowFailsExactlyTheWindowCases) {
  table_.attention_prefill = PrefillIgnoringWindow;
  table_.attention_decode = DecodeIgnoringWindow;
  const ConformanceReport report = RunBroken({"attention_prefill", "attention_decode"});
  int window_cases = 0;
  for (const CaseResult& c : report.cases) {
    const bool windowed = c.name.find("sliding window") != std::string::npos;
    window_cases += windowed ? 1 : 0;
    EXPECT_EQ(c.passed, !windowed) << Describe(c);
  }
  EXPECT_EQ(window_cases, 2);
}

TEST_F(BrokenPluginTest, OpErrorsFailTheCaseWithTheBackendsMessage) {
  table_.silu_mul = UnsupportedSiluMul;
  const ConformanceReport report = RunBroken({"silu_mul"});
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    EXPECT_FALSE(c.passed);
    EXPECT_THAT(c.error, HasSubstr("broken: silu_mul"));
  }
}

TEST_F(BrokenPluginTest, MissingMoeEntriesSkipTheMoeCases) {
  table_.moe_route = nullptr;
  table_.moe_experts = nullptr;
  const ConformanceReport report = RunBroken({"moe_route", "moe_experts", "silu_mul"});
  EXPECT_EQ(report.num_failed(), 0);
  EXPECT_EQ(report.num_skipped() + report.num_passed(), static_cast<int>(report.cases.size()));
  for (const CaseResult& c : report.cases) {
    EXPECT_EQ(c.skipped, c.op != "silu_mul") << Describe(c);
    if (c.skipped) {
      EXPECT_THAT(c.error, HasSubstr("candidate has no MoE entries"));
    }
  }
}

TEST_F(BrokenPluginTest, ACopyThatFailsAfterWritingFailsTheZeroByteRunCase) {
  table_.copy_runs = CopyRunsCheckingLate;
  const ConformanceReport report = RunBroken({"copy_runs"});
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    const bool late = c.name == "rejects a run of 0 bytes after valid runs";
    EXPECT_EQ(c.passed, !late) << Describe(c);
    if (late) {
      EXPECT_THAT(c.error, HasSubstr("the failing call wrote its output"));
    }
  }
}

TEST_F(BrokenPluginTest, ADroppedRunFailsEveryCaseWithSeveralRuns) {
  table_.copy_runs = CopyRunsDroppingTheLast;
  const ConformanceReport report = RunBroken({"copy_runs"});
  int failed = 0;
  for (const CaseResult& c : report.cases) {
    failed += c.passed ? 0 : 1;
    if (c.name == "one byte" || c.name.starts_with("n = 0") ||
        c.name.starts_with("a 3 MiB run") || c.name.starts_with("rejects")) {
      EXPECT_TRUE(c.passed) << Describe(c);
    }
  }
  EXPECT_GE(failed, 10);
}

TEST_F(BrokenPluginTest, AMaskThatReplacesAnotherFailsTheRepeatedRowCases) {
  table_.mask_logits = MaskLogitsLastWins;
  const ConformanceReport report = RunBroken({"mask_logits"});
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    // Only the mask-alone cases list a row twice.
    const bool repeats = !c.name.starts_with("then sample") && !c.name.starts_with("rejects");
    EXPECT_EQ(c.passed, !repeats) << Describe(c);
  }
}

TEST_F(BrokenPluginTest, MaskBitsInTheWrongOrderFailEveryMaskCase) {
  table_.mask_logits = MaskLogitsBitsReversed;
  const ConformanceReport report = RunBroken({"mask_logits"});
  ASSERT_FALSE(report.cases.empty());
  for (const CaseResult& c : report.cases) {
    EXPECT_EQ(c.passed, c.name.starts_with("rejects")) << Describe(c);
  }
}

TEST_F(BrokenPluginTest, TheSameSeedGivesTheSameData) {
  table_.rope = InterleavedRope;
  const ConformanceReport first = RunBroken({"rope"});
  const ConformanceReport second = RunBroken({"rope"});
  ASSERT_EQ(first.cases.size(), second.cases.size());
  for (size_t i = 0; i < first.cases.size(); ++i) {
    EXPECT_EQ(first.cases[i].max_error, second.cases[i].max_error);
  }
}

TEST(ConformanceSuiteTest, CaseFilterRunsTheMatchingCasesOnly) {
  auto a = NaiveBackend(), b = NaiveBackend();
  ConformanceOptions all;
  all.ops = {"sample"};
  auto every = RunConformance(*a, *b, all);
  ASSERT_TRUE(every.ok()) << every.status();
  ConformanceOptions some = all;
  some.case_filter = "V=1000 ";
  auto filtered = RunConformance(*a, *b, some);
  ASSERT_TRUE(filtered.ok()) << filtered.status();
  ASSERT_FALSE(filtered->cases.empty());
  EXPECT_LT(filtered->cases.size(), every->cases.size());
  for (const CaseResult& c : filtered->cases) {
    EXPECT_THAT(c.name, HasSubstr("V=1000 "));
    EXPECT_TRUE(c.passed) << Describe(c);
  }
  some.case_filter = "no such case";
  auto none = RunConformance(*a, *b, some);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("no such case"));
}

TEST(ConformanceSuiteTest, UnknownOpIsAnError) {
  auto a = NaiveBackend(), b = NaiveBackend();
  ConformanceOptions options;
  options.ops = {"gemm", "convolution"};
  auto report = RunConformance(*a, *b, options);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("convolution"));
}

}  // namespace
}  // namespace strata
