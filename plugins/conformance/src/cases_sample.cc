// Conformance cases for the optional `sample` and `mask_logits` entries (skipped when either
// backend leaves one NULL): the sampled ids must match the reference exactly, the logprobs and
// the masked logits within tolerance (masked entries are -inf on both sides).
// Logits are in the act dtype, as the engine passes them; inputs are rounded to the coarser of
// the two backends' dtypes, so both sample the same numbers (and bf16 makes ties common).
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "harness.h"

namespace strata::conformance {
namespace {

enum class Shape { kPeaked, kFlat, kTies };

// kPeaked: a few tokens far above a long tail (a language model's usual row); kFlat: values in
// [-1, 1) (many tokens matter for top-p); kTies: values from {-2, 0, 1, 3}, so equal logits
// straddle every cut and the lower-id-first rule decides.
std::vector<float> Logits(Rng& rng, int64_t rows, int64_t vocab, Shape shape) {
  std::vector<float> out(static_cast<size_t>(rows * vocab));
  static constexpr float kLevels[] = {-2.0f, 0.0f, 1.0f, 3.0f};
  for (float& v : out) {
    switch (shape) {
      case Shape::kPeaked:
        v = static_cast<float>(rng.Uniform(-4, 2) + (rng.Int(0, 999) < 3 ? 8 : 0));
        break;
      case Shape::kFlat:
        v = static_cast<float>(rng.Uniform(-1, 1));
        break;
      case Shape::kTies:
        v = kLevels[rng.Int(0, 3)];
        break;
    }
  }
  return out;
}

// Row r's parameters cycle through greedy, plain temperature, and each truncation alone and
// combined; the draw and the logprob count come from the generator.
strata_sample_params Params(Rng& rng, int64_t r, int64_t vocab, bool logprobs) {
  strata_sample_params p{};
  p.top_p = 1.0f;
  switch (r % 7) {
    case 0: p.temperature = 0.0f; break;
    case 1: p.temperature = 1.0f; break;
    case 2: p.temperature = 0.7f, p.top_k = 1 + rng.Int(0, 49); break;
    case 3: p.temperature = 1.3f, p.top_p = 0.9f; break;
    case 4: p.temperature = 0.8f, p.min_p = 0.05f; break;
    case 5: p.temperature = 1.0f, p.top_k = static_cast<int32_t>(vocab / 2), p.top_p = 0.5f,
            p.min_p = 0.1f; break;
    default: p.temperature = 2.0f, p.top_p = 0.98f; break;
  }
  p.uniform = rng.Uniform(0, 1);
  p.num_logprobs = logprobs ? rng.Int(-1, STRATA_MAX_LOGPROBS) : -1;
  return p;
}

std::vector<int32_t> AsInts(const std::vector<strata_sample_params>& params) {
  std::vector<int32_t> ints(params.size() * sizeof(strata_sample_params) / sizeof(int32_t));
  std::memcpy(ints.data(), params.data(), params.size() * sizeof(strata_sample_params));
  return ints;
}

void AddSample(uint64_t seed, int64_t rows, int64_t vocab, Shape shape, bool logprobs,
               CaseList* out) {
  static constexpr const char* kShape[] = {"peaked", "flat", "ties"};
  CaseBuilder cb(seed, "sample",
                 absl::StrFormat("N=%d V=%d %s%s", rows, vocab, kShape[static_cast<int>(shape)],
                                 logprobs ? " logprobs" : ""));
  const int logits = cb.Values("logits", Role::kAct, Logits(cb.rng(), rows, vocab, shape));
  std::vector<strata_sample_params> params;
  for (int64_t r = 0; r < rows; ++r) params.push_back(Params(cb.rng(), r, vocab, logprobs));
  const int par = cb.Ints("params", AsInts(params));
  const int tokens = cb.Output(cb.Ints("tokens", std::vector<int32_t>(rows, -1)));
  const int lp_cols = 1 + STRATA_MAX_LOGPROBS;
  const int lp = cb.Output(
      cb.Values("logprobs", Role::kF32, std::vector<float>(rows * lp_cols, 7.0f)));
  const int ti = cb.Output(cb.Ints("top_ids", std::vector<int32_t>(rows * STRATA_MAX_LOGPROBS, -1)));
  TestCase c = cb.Build([=](OpContext& ctx) {
    strata_tensor lt = ctx.Tensor(logits, {rows, vocab});
    strata_tensor tt = ctx.Tensor(tokens, {rows});
    strata_tensor lpt = ctx.Tensor(lp, {rows, lp_cols});
    strata_tensor tit = ctx.Tensor(ti, {rows, STRATA_MAX_LOGPROBS});
    const auto* p = static_cast<const strata_sample_params*>(ctx.Ptr(par));
    return ctx.Check(ctx.api().sample(ctx.backend(), ctx.stream(), &lt, p, &tt,
                                      logprobs ? &lpt : nullptr, logprobs ? &tit : nullptr),
                     "sample");
  });
  c.needs_sample = true;
  out->push_back(std::move(c));
}

// tokens has one entry fewer than there are rows: the op must refuse.
void AddSampleNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "sample", "rejects tokens of the wrong length");
  const int64_t rows = 4, vocab = 100;
  const int logits = cb.Uniform("logits", Role::kAct, rows * vocab);
  std::vector<strata_sample_params> params(rows);
  for (auto& p : params) p.top_p = 1.0f, p.num_logprobs = -1;
  const int par = cb.Ints("params", AsInts(params));
  const int tokens = cb.Ints("tokens", std::vector<int32_t>(rows, -1));
  TestCase c = cb.BuildNegative(
      [=](OpContext& ctx) {
        strata_tensor lt = ctx.Tensor(logits, {rows, vocab});
        strata_tensor tt = ctx.Tensor(tokens, {rows - 1});
        const auto* p = static_cast<const strata_sample_params*>(ctx.Ptr(par));
        return ctx.Check(
            ctx.api().sample(ctx.backend(), ctx.stream(), &lt, p, &tt, nullptr, nullptr),
            "sample");
      },
      STRATA_ERR_INVALID_ARGUMENT);
  c.needs_sample = true;
  out->push_back(std::move(c));
}

// Mask words for `entries` list entries over `vocab` ids: each id allowed with probability
// `density`; entry 0 also gets one all-zero and one all-one word where the row is wide enough.
std::vector<int32_t> Masks(Rng& rng, int64_t entries, int64_t vocab, double density) {
  const int64_t words = (vocab + 31) / 32;
  std::vector<int32_t> out(static_cast<size_t>(entries * words));
  for (int64_t i = 0; i < entries; ++i) {
    for (int64_t w = 0; w < words; ++w) {
      uint32_t word = 0;
      for (int b = 0; b < 32; ++b) {
        if (rng.Uniform(0, 1) < density) word |= 1u << b;
      }
      out[i * words + w] = static_cast<int32_t>(word);
    }
  }
  if (words >= 3) out[0] = 0, out[1] = -1;
  return out;
}

// mask_logits alone: `rows` lists each logits row in a shuffled order, then a row again (both
// masks apply), then places that do nothing (-1 and one past the last row).
void AddMaskLogits(uint64_t seed, int64_t n_rows, int64_t vocab, double density, CaseList* out) {
  CaseBuilder cb(seed, "mask_logits",
                 absl::StrFormat("N=%d V=%d density %.3g", n_rows, vocab, density));
  const int logits = cb.Output(cb.Uniform("logits", Role::kAct, n_rows * vocab, -4, 4));
  std::vector<int32_t> rows;
  for (int64_t r = n_rows - 1; r >= 0; r -= 2) rows.push_back(static_cast<int32_t>(r));
  for (int64_t r = n_rows - 2; r >= 0; r -= 2) rows.push_back(static_cast<int32_t>(r));
  rows.push_back(0);
  rows.push_back(-1);
  rows.push_back(static_cast<int32_t>(n_rows));
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t words = (vocab + 31) / 32;
  const int masks = cb.Ints("masks", Masks(cb.rng(), n, vocab, density));
  const int row_ids = cb.Ints("rows", rows);
  TestCase c = cb.Build([=](OpContext& ctx) {
    strata_tensor lt = ctx.Tensor(logits, {n_rows, vocab});
    strata_tensor rt = ctx.Tensor(row_ids, {n});
    strata_tensor mt = ctx.Tensor(masks, {n, words});
    return ctx.Check(ctx.api().mask_logits(ctx.backend(), ctx.stream(), &lt, &rt, &mt),
                     "mask_logits");
  });
  c.needs_entry = "mask_logits";
  out->push_back(std::move(c));
}

// mask_logits then sample, as the engine runs a constrained step: the ids must match exactly
// and never be a masked one (the reference guarantees the latter by construction).
void AddMaskThenSample(uint64_t seed, int64_t n_rows, int64_t vocab, double density,
                       CaseList* out) {
  CaseBuilder cb(seed, "mask_logits",
                 absl::StrFormat("then sample: N=%d V=%d density %.3g", n_rows, vocab, density));
  const int logits = cb.Values("logits", Role::kAct,
                               Logits(cb.rng(), n_rows, vocab, Shape::kPeaked));
  std::vector<strata_sample_params> params;
  for (int64_t r = 0; r < n_rows; ++r) params.push_back(Params(cb.rng(), r, vocab, true));
  const int par = cb.Ints("params", AsInts(params));
  std::vector<int32_t> rows;
  for (int64_t r = 0; r < n_rows; ++r) rows.push_back(static_cast<int32_t>(r));
  const int64_t words = (vocab + 31) / 32;
  std::vector<int32_t> mask_words = Masks(cb.rng(), n_rows, vocab, density);
  // Every row keeps at least one id (a row with none allowed is never sampled by the engine).
  for (int64_t r = 0; r < n_rows; ++r) mask_words[r * words + words - 1] |= 1;
  const int masks = cb.Ints("masks", std::move(mask_words));
  const int row_ids = cb.Ints("rows", rows);
  const int tokens = cb.Output(cb.Ints("tokens", std::vector<int32_t>(n_rows, -1)));
  const int lp_cols = 1 + STRATA_MAX_LOGPROBS;
  const int lp = cb.Output(
      cb.Values("logprobs", Role::kF32, std::vector<float>(n_rows * lp_cols, 7.0f)));
  const int ti =
      cb.Output(cb.Ints("top_ids", std::vector<int32_t>(n_rows * STRATA_MAX_LOGPROBS, -1)));
  TestCase c = cb.Build([=](OpContext& ctx) {
    strata_tensor lt = ctx.Tensor(logits, {n_rows, vocab});
    strata_tensor rt = ctx.Tensor(row_ids, {n_rows});
    strata_tensor mt = ctx.Tensor(masks, {n_rows, words});
    absl::Status st = ctx.Check(
        ctx.api().mask_logits(ctx.backend(), ctx.stream(), &lt, &rt, &mt), "mask_logits");
    if (!st.ok()) return st;
    strata_tensor tt = ctx.Tensor(tokens, {n_rows});
    strata_tensor lpt = ctx.Tensor(lp, {n_rows, lp_cols});
    strata_tensor tit = ctx.Tensor(ti, {n_rows, STRATA_MAX_LOGPROBS});
    const auto* p = static_cast<const strata_sample_params*>(ctx.Ptr(par));
    return ctx.Check(ctx.api().sample(ctx.backend(), ctx.stream(), &lt, p, &tt, &lpt, &tit),
                     "sample");
  });
  c.needs_sample = true;
  c.needs_entry = "mask_logits";
  out->push_back(std::move(c));
}

// masks one word too narrow for the vocabulary: the op must refuse and leave logits alone.
void AddMaskLogitsNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "mask_logits", "rejects masks narrower than the vocabulary");
  const int64_t n_rows = 2, vocab = 100, words = (vocab + 31) / 32;
  const int logits = cb.Output(cb.Uniform("logits", Role::kAct, n_rows * vocab));
  const int masks = cb.Ints("masks", std::vector<int32_t>(n_rows * words, 0));
  const int row_ids = cb.Ints("rows", {0, 1});
  TestCase c = cb.BuildNegative(
      [=](OpContext& ctx) {
        strata_tensor lt = ctx.Tensor(logits, {n_rows, vocab});
        strata_tensor rt = ctx.Tensor(row_ids, {n_rows});
        strata_tensor mt = ctx.Tensor(masks, {n_rows, words - 1});
        return ctx.Check(ctx.api().mask_logits(ctx.backend(), ctx.stream(), &lt, &rt, &mt),
                         "mask_logits");
      },
      STRATA_ERR_INVALID_ARGUMENT);
  c.needs_entry = "mask_logits";
  out->push_back(std::move(c));
}

}  // namespace

void AddMaskLogitsCases(uint64_t seed, CaseList* out) {
  AddMaskLogits(seed, 3, 33, 0.5, out);
  AddMaskLogits(seed, 6, 1000, 0.9, out);
  AddMaskLogits(seed, 5, 128256, 0.01, out);
  AddMaskThenSample(seed, 14, 1000, 0.05, out);
  AddMaskThenSample(seed, 7, 151936, 0.001, out);
  AddMaskThenSample(seed, 64, 32000, 0.3, out);
  AddMaskLogitsNegative(seed, out);
}

void AddSampleCases(uint64_t seed, CaseList* out) {
  AddSample(seed, 7, 1000, Shape::kPeaked, true, out);
  AddSample(seed, 14, 517, Shape::kFlat, true, out);
  AddSample(seed, 21, 64, Shape::kTies, true, out);
  AddSample(seed, 64, 32000, Shape::kPeaked, false, out);
  // Vocabulary sizes of Llama 3 and Qwen3 (rows wider than any one thread block's tile).
  AddSample(seed, 9, 128256, Shape::kPeaked, true, out);
  AddSample(seed, 8, 151936, Shape::kFlat, false, out);
  AddSampleNegative(seed, out);
}

}  // namespace strata::conformance
