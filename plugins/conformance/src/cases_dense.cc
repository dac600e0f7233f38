// Conformance cases for the dense ops: embedding, rms_norm, gemm, rope, silu_mul, gather_rows.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness.h"

namespace strata::conformance {
namespace {

void AddEmbedding(uint64_t seed, int64_t vocab, int64_t hidden, int64_t tokens, CaseList* out) {
  CaseBuilder cb(seed, "embedding", absl::StrFormat("V=%d H=%d T=%d", vocab, hidden, tokens));
  std::vector<int32_t> ids(tokens);
  for (auto& id : ids) id = cb.rng().Int(0, static_cast<int32_t>(vocab) - 1);
  ids[0] = static_cast<int32_t>(vocab) - 1;  // both ends of the table
  if (tokens > 1) ids[1] = 0;
  const int table = cb.Uniform("table", Role::kWeight, vocab * hidden);
  const int id_array = cb.Ints("ids", ids);
  const int y = cb.Output(cb.Uniform("out", Role::kAct, tokens * hidden));
  out->push_back(cb.Build([=](OpContext& ctx) {
    strata_tensor t = ctx.Tensor(table, {vocab, hidden});
    strata_tensor i = ctx.Tensor(id_array, {tokens});
    strata_tensor o = ctx.Tensor(y, {tokens, hidden});
    return ctx.Check(ctx.api().embedding(ctx.backend(), ctx.stream(), &t, &i, &o), "embedding");
  }));
}

struct RmsNormSpec {
  int64_t tokens;
  int64_t heads;  // 0: x is [T, H]; else [T, heads, D]
  int64_t dim;    // H, or D when heads > 0
  int64_t x_stride = 0;
  bool residual = false;
  bool in_place = false;  // out aliases x
  float eps = 1e-6f;
  double x_range = 2;  // x is uniform in [-x_range, x_range)
};

std::string Describe(const RmsNormSpec& s) {
  std::string name = s.heads > 0 ? absl::StrFormat("T=%d h=%d D=%d", s.tokens, s.heads, s.dim)
                                 : absl::StrFormat("T=%d H=%d", s.tokens, s.dim);
  if (s.x_stride != 0) absl::StrAppend(&name, " x_stride=", s.x_stride);
  if (s.residual) absl::StrAppend(&name, " residual");
  if (s.in_place) absl::StrAppend(&name, " in-place");
  if (s.x_range < 0.1) absl::StrAppend(&name, absl::StrFormat(" |x|<%g eps=%g", s.x_range, s.eps));
  return name;
}

void AddRmsNorm(uint64_t seed, const RmsNormSpec& s, CaseList* out) {
  CaseBuilder cb(seed, "rms_norm", Describe(s));
  const int64_t row = s.dim * std::max<int64_t>(s.heads, 1);
  const int64_t x_row = s.x_stride != 0 ? s.x_stride : row;
  const int x = cb.Uniform("x", Role::kAct, s.tokens * x_row, -s.x_range, s.x_range);
  const int w = cb.Uniform("weight", Role::kWeight, s.dim, 0.5, 1.5);
  const int res = s.residual ? cb.Output(cb.Uniform("residual", Role::kAct, s.tokens * row)) : -1;
  const int y =
      s.in_place ? cb.Output(x) : cb.Output(cb.Uniform("out", Role::kAct, s.tokens * row));
  out->push_back(cb.Build([=](OpContext& ctx) {
    auto shaped = [&](int id, int64_t stride) {
      return s.heads > 0 ? ctx.Tensor(id, {s.tokens, s.heads, s.dim}, stride)
                         : ctx.Tensor(id, {s.tokens, s.dim}, stride);
    };
    strata_tensor xt = shaped(x, s.x_stride);
    strata_tensor ot = s.in_place ? xt : shaped(y, 0);
    strata_tensor rt = s.residual ? shaped(res, 0) : strata_tensor{};
    strata_tensor wt = ctx.Tensor(w, {s.dim});
    return ctx.Check(ctx.api().rms_norm(ctx.backend(), ctx.stream(), &xt,
                                        s.residual ? &rt : nullptr, &wt, s.eps, &ot),
                     "rms_norm");
  }));
}

// The weight has fewer elements than the normalized dim: the op must refuse.
void AddRmsNormNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "rms_norm", "rejects weight of the wrong size");
  const int x = cb.Uniform("x", Role::kAct, 3 * 64);
  const int w = cb.Uniform("weight", Role::kWeight, 64);
  out->push_back(cb.BuildNegative(
      [=](OpContext& ctx) {
        strata_tensor xt = ctx.Tensor(x, {3, 64});
        strata_tensor wt = ctx.Tensor(w, {32});
        return ctx.Check(
            ctx.api().rms_norm(ctx.backend(), ctx.stream(), &xt, nullptr, &wt, 1e-6f, &xt),
            "rms_norm");
      },
      STRATA_ERR_INVALID_ARGUMENT));
}

struct GemmSpec {
  int64_t m, n, k;
  bool bias = false;
  bool accumulate = false;
  int64_t x_stride = 0;
  int64_t out_stride = 0;
};

std::string Describe(const GemmSpec& s) {
  std::string name = absl::StrFormat("M=%d N=%d K=%d", s.m, s.n, s.k);
  if (s.bias) absl::StrAppend(&name, " bias");
  if (s.accumulate) absl::StrAppend(&name, " accumulate");
  if (s.x_stride != 0) absl::StrAppend(&name, " x_stride=", s.x_stride);
  if (s.out_stride != 0) absl::StrAppend(&name, " out_stride=", s.out_stride);
  return name;
}

void AddGemm(uint64_t seed, const GemmSpec& s, CaseList* out) {
  CaseBuilder cb(seed, "gemm", Describe(s));
  const int x = cb.Uniform("x", Role::kAct, s.m * (s.x_stride ? s.x_stride : s.k));
  const int w = cb.Uniform("w", Role::kWeight, s.n * s.k);
  const int b = s.bias ? cb.Uniform("bias", Role::kWeight, s.n) : -1;
  const int y = cb.Output(cb.Uniform("out", Role::kAct, s.m * (s.out_stride ? s.out_stride : s.n)));
  out->push_back(cb.Build([=](OpContext& ctx) {
    strata_tensor xt = ctx.Tensor(x, {s.m, s.k}, s.x_stride);
    strata_tensor wt = ctx.Tensor(w, {s.n, s.k});
    strata_tensor bt = s.bias ? ctx.Tensor(b, {s.n}) : strata_tensor{};
    strata_tensor ot = ctx.Tensor(y, {s.m, s.n}, s.out_stride);
    return ctx.Check(ctx.api().gemm(ctx.backend(), ctx.stream(), &xt, &wt, s.bias ? &bt : nullptr,
                                    s.accumulate ? 1 : 0, &ot),
                     "gemm");
  }));
}

// x has K=32 columns, w has K=48: the op must refuse (buffers are large enough either way).
void AddGemmNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "gemm", "rejects mismatched K");
  const int x = cb.Uniform("x", Role::kAct, 4 * 48);
  const int w = cb.Uniform("w", Role::kWeight, 8 * 48);
  const int y = cb.Uniform("out", Role::kAct, 4 * 8);
  out->push_back(cb.BuildNegative(
      [=](OpContext& ctx) {
        strata_tensor xt = ctx.Tensor(x, {4, 32});
        strata_tensor wt = ctx.Tensor(w, {8, 48});
        strata_tensor ot = ctx.Tensor(y, {4, 8});
        return ctx.Check(ctx.api().gemm(ctx.backend(), ctx.stream(), &xt, &wt, nullptr, 0, &ot),
                         "gemm");
      },
      STRATA_ERR_INVALID_ARGUMENT));
}

struct RopeSpec {
  int64_t tokens = 0, q_heads = 0, k_heads = 0, dim = 0, rotary_half = 0;  // k_heads 0: k NULL
  double theta = 10000;
  float mscale = 1.0f;
  int32_t max_position = 64;
  bool fused = false;  // q and k are slices of one [T, (Hq + 2 Hk) * D] QKV buffer
  int64_t q_stride = 0, k_stride = 0;
};

RopeSpec MakeRope(int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t dim,
                  int64_t rotary_half, int32_t max_position = 64) {
  RopeSpec spec;
  spec.tokens = tokens;
  spec.q_heads = q_heads;
  spec.k_heads = k_heads;
  spec.dim = dim;
  spec.rotary_half = rotary_half;
  spec.max_position = max_position;
  return spec;
}

std::string Describe(const RopeSpec& s) {
  std::string name = absl::StrFormat("T=%d Hq=%d Hk=%d D=%d R=%d pos<%d", s.tokens, s.q_heads,
                                     s.k_heads, s.dim, s.rotary_half, s.max_position);
  if (2 * s.rotary_half < s.dim) absl::StrAppend(&name, " partial");
  if (s.mscale != 1.0f) absl::StrAppend(&name, absl::StrFormat(" mscale=%g", s.mscale));
  if (s.k_heads == 0) absl::StrAppend(&name, " k=NULL");
  if (s.fused) absl::StrAppend(&name, " fused-qkv");
  if (s.q_stride != 0) absl::StrAppend(&name, " strides=", s.q_stride, "/", s.k_stride);
  return name;
}

void AddRope(uint64_t seed, const RopeSpec& s, CaseList* out) {
  CaseBuilder cb(seed, "rope", Describe(s));
  std::vector<float> inv_freq(s.rotary_half);
  for (int64_t i = 0; i < s.rotary_half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(s.theta, -static_cast<double>(i) / s.rotary_half));
  }
  std::vector<int32_t> positions(s.tokens);
  for (auto& p : positions) p = cb.rng().Int(0, s.max_position - 1);
  const int64_t fused_row = (s.q_heads + 2 * s.k_heads) * s.dim;
  const int64_t q_row = s.fused ? fused_row : (s.q_stride ? s.q_stride : s.q_heads * s.dim);
  const int64_t k_row = s.k_stride ? s.k_stride : s.k_heads * s.dim;
  const int q = cb.Output(cb.Uniform(s.fused ? "qkv" : "q", Role::kAct, s.tokens * q_row));
  const int k =
      (s.k_heads == 0 || s.fused) ? q : cb.Output(cb.Uniform("k", Role::kAct, s.tokens * k_row));
  const int pos = cb.Ints("positions", positions);
  const int freq = cb.Values("inv_freq", Role::kF32, inv_freq);
  out->push_back(cb.Build([=](OpContext& ctx) {
    strata_tensor qt =
        ctx.Tensor(q, {s.tokens, s.q_heads, s.dim}, s.fused ? fused_row : s.q_stride);
    strata_tensor kt =
        s.fused ? ctx.Tensor(q, {s.tokens, s.k_heads, s.dim}, fused_row, s.q_heads * s.dim)
                : ctx.Tensor(k, {s.tokens, s.k_heads, s.dim}, s.k_stride);
    strata_tensor pt = ctx.Tensor(pos, {s.tokens});
    strata_tensor ft = ctx.Tensor(freq, {s.rotary_half});
    return ctx.Check(ctx.api().rope(ctx.backend(), ctx.stream(), &qt,
                                    s.k_heads == 0 ? nullptr : &kt, &pt, &ft, s.mscale),
                     "rope");
  }));
}

void AddSiluMul(uint64_t seed, int64_t tokens, int64_t inter, CaseList* out) {
  CaseBuilder cb(seed, "silu_mul", absl::StrFormat("T=%d I=%d", tokens, inter));
  const int x = cb.Uniform("x", Role::kAct, tokens * 2 * inter, -6, 6);
  const int y = cb.Output(cb.Uniform("out", Role::kAct, tokens * inter));
  out->push_back(cb.Build([=](OpContext& ctx) {
    strata_tensor xt = ctx.Tensor(x, {tokens, 2 * inter});
    strata_tensor ot = ctx.Tensor(y, {tokens, inter});
    return ctx.Check(ctx.api().silu_mul(ctx.backend(), ctx.stream(), &xt, &ot), "silu_mul");
  }));
}

void AddGatherRows(uint64_t seed, int64_t tokens, int64_t hidden, int64_t n, CaseList* out) {
  CaseBuilder cb(seed, "gather_rows", absl::StrFormat("T=%d H=%d N=%d", tokens, hidden, n));
  std::vector<int32_t> rows(n);
  for (auto& r : rows) r = cb.rng().Int(0, static_cast<int32_t>(tokens) - 1);
  rows[n - 1] = static_cast<int32_t>(tokens) - 1;  // the last token, as for logits
  const int x = cb.Uniform("x", Role::kAct, tokens * hidden);
  const int r = cb.Ints("rows", rows);
  const int y = cb.Output(cb.Uniform("out", Role::kAct, n * hidden));
  out->push_back(cb.Build([=](OpContext& ctx) {
    strata_tensor xt = ctx.Tensor(x, {tokens, hidden});
    strata_tensor rt = ctx.Tensor(r, {n});
    strata_tensor ot = ctx.Tensor(y, {n, hidden});
    return ctx.Check(ctx.api().gather_rows(ctx.backend(), ctx.stream(), &xt, &rt, &ot),
                     "gather_rows");
  }));
}

struct GemmSiluSpec {
  int64_t m, inter, k;
  bool bias = false;
  int64_t x_stride = 0;
};

// silu_mul(gemm(x, w_gate_up, bias)) through the fused entry; scratch is not compared (its
// contents afterwards are unspecified).
void AddGemmSiluMul(uint64_t seed, const GemmSiluSpec& s, CaseList* out) {
  CaseBuilder cb(seed, "gemm_silu_mul",
                 absl::StrFormat("M=%d I=%d K=%d%s%s", s.m, s.inter, s.k, s.bias ? " bias" : "",
                                 s.x_stride ? " strided x" : ""));
  const int x = cb.Uniform("x", Role::kAct, s.m * (s.x_stride ? s.x_stride : s.k));
  const int w = cb.Uniform("w_gate_up", Role::kWeight, 2 * s.inter * s.k);
  const int b = s.bias ? cb.Uniform("bias", Role::kWeight, 2 * s.inter) : -1;
  const int scratch = cb.Uniform("scratch", Role::kAct, s.m * 2 * s.inter);
  const int y = cb.Output(cb.Uniform("out", Role::kAct, s.m * s.inter));
  TestCase c = cb.Build([=](OpContext& ctx) {
    strata_tensor xt = ctx.Tensor(x, {s.m, s.k}, s.x_stride);
    strata_tensor wt = ctx.Tensor(w, {2 * s.inter, s.k});
    strata_tensor bt = s.bias ? ctx.Tensor(b, {2 * s.inter}) : strata_tensor{};
    strata_tensor st = ctx.Tensor(scratch, {s.m, 2 * s.inter});
    strata_tensor ot = ctx.Tensor(y, {s.m, s.inter});
    return ctx.Check(ctx.api().gemm_silu_mul(ctx.backend(), ctx.stream(), &xt, &wt,
                                             s.bias ? &bt : nullptr, &st, &ot),
                     "gemm_silu_mul");
  });
  c.needs_entry = "gemm_silu_mul";
  out->push_back(std::move(c));
}

// out with I + 1 columns: the op must refuse.
void AddGemmSiluMulNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "gemm_silu_mul", "rejects out of the wrong width");
  const int x = cb.Uniform("x", Role::kAct, 2 * 32);
  const int w = cb.Uniform("w_gate_up", Role::kWeight, 16 * 32);
  const int scratch = cb.Uniform("scratch", Role::kAct, 2 * 16);
  const int y = cb.Uniform("out", Role::kAct, 2 * 9);
  TestCase c = cb.BuildNegative(
      [=](OpContext& ctx) {
        strata_tensor xt = ctx.Tensor(x, {2, 32});
        strata_tensor wt = ctx.Tensor(w, {16, 32});
        strata_tensor st = ctx.Tensor(scratch, {2, 16});
        strata_tensor ot = ctx.Tensor(y, {2, 9});
        return ctx.Check(
            ctx.api().gemm_silu_mul(ctx.backend(), ctx.stream(), &xt, &wt, nullptr, &st, &ot),
            "gemm_silu_mul");
      },
      STRATA_ERR_INVALID_ARGUMENT);
  c.needs_entry = "gemm_silu_mul";
  out->push_back(std::move(c));
}

}  // namespace

void AddGemmSiluMulCases(uint64_t seed, CaseList* out) {
  // Decode-sized M (a GPU plugin's fused weight-streaming path) with and without bias, a K of
  // 4,096 and more units than a GPU has warps; larger M (a GPU plugin's tensor-core path, K
  // split at M = 64) with strided x.
  AddGemmSiluMul(seed, {.m = 1, .inter = 48, .k = 64}, out);
  AddGemmSiluMul(seed, {.m = 2, .inter = 33, .k = 264, .bias = true}, out);
  AddGemmSiluMul(seed, {.m = 1, .inter = 2500, .k = 4096}, out);
  AddGemmSiluMul(seed, {.m = 2, .inter = 5000, .k = 128, .bias = true, .x_stride = 136}, out);
  AddGemmSiluMul(seed, {.m = 9, .inter = 96, .k = 200, .bias = true, .x_stride = 208}, out);
  AddGemmSiluMul(seed, {.m = 64, .inter = 200, .k = 1024, .bias = true}, out);
  AddGemmSiluMul(seed, {.m = 5, .inter = 40, .k = 64}, out);
  // 33-64 rows over more than 16 column tiles (a GPU plugin's deep-ring tensor-core path).
  AddGemmSiluMul(seed, {.m = 40, .inter = 1100, .k = 256, .bias = true}, out);
  AddGemmSiluMul(seed, {.m = 64, .inter = 2100, .k = 512, .x_stride = 520}, out);
  AddGemmSiluMulNegative(seed, out);
}

void AddEmbeddingCases(uint64_t seed, CaseList* out) {
  AddEmbedding(seed, 50, 16, 1, out);
  AddEmbedding(seed, 100, 64, 17, out);
  AddEmbedding(seed, 1000, 256, 40, out);
}

void AddRmsNormCases(uint64_t seed, CaseList* out) {
  AddRmsNorm(seed, {.tokens = 1, .heads = 0, .dim = 32}, out);
  AddRmsNorm(seed, {.tokens = 7, .heads = 0, .dim = 64, .eps = 1e-5f}, out);
  AddRmsNorm(seed, {.tokens = 16, .heads = 0, .dim = 4096, .residual = true}, out);
  AddRmsNorm(seed, {.tokens = 9, .heads = 0, .dim = 256, .residual = true, .in_place = true}, out);
  AddRmsNorm(seed, {.tokens = 6, .heads = 0, .dim = 128, .x_stride = 160, .residual = true}, out);
  AddRmsNorm(seed, {.tokens = 3, .heads = 2, .dim = 64}, out);
  // Inputs small enough that eps matters: eps belongs inside the square root.
  AddRmsNorm(seed, {.tokens = 4, .heads = 0, .dim = 64, .eps = 1e-5f, .x_range = 0.004}, out);
  // QK-norm on the q slice of a fused QKV row (8 q heads, 2 + 2 kv heads), in place.
  AddRmsNorm(seed, {.tokens = 5, .heads = 8, .dim = 128, .x_stride = 12 * 128, .in_place = true},
             out);
  AddRmsNormNegative(seed, out);
}

void AddGemmCases(uint64_t seed, CaseList* out) {
  AddGemm(seed, {.m = 1, .n = 64, .k = 32}, out);
  AddGemm(seed, {.m = 5, .n = 17, .k = 13}, out);
  AddGemm(seed, {.m = 37, .n = 96, .k = 200, .bias = true}, out);
  AddGemm(seed, {.m = 16, .n = 48, .k = 64, .accumulate = true}, out);
  AddGemm(seed, {.m = 20, .n = 33, .k = 100, .bias = true, .accumulate = true}, out);
  AddGemm(seed, {.m = 8, .n = 128, .k = 4096}, out);
  AddGemm(seed, {.m = 128, .n = 256, .k = 512}, out);
  AddGemm(seed, {.m = 12, .n = 64, .k = 96, .bias = true, .x_stride = 160, .out_stride = 80}, out);
  // Decode-sized M (a GPU plugin's weight-streaming path): every M up to 4, odd N, bias and
  // accumulation, strided x and out, a K of 4,096, the smallest K, and more rows than a GPU
  // has warps.
  AddGemm(seed, {.m = 2, .n = 33, .k = 264, .bias = true, .accumulate = true}, out);
  AddGemm(seed, {.m = 3, .n = 70, .k = 128, .x_stride = 136, .out_stride = 72}, out);
  AddGemm(seed, {.m = 4, .n = 96, .k = 4096, .bias = true}, out);
  AddGemm(seed, {.m = 1, .n = 7, .k = 8, .accumulate = true}, out);
  AddGemm(seed, {.m = 1, .n = 4500, .k = 64, .bias = true}, out);
  AddGemm(seed, {.m = 2, .n = 4500, .k = 4096, .accumulate = true}, out);
  // M up to 64 (a GPU plugin's tensor-core path, K split across CTAs once K has 8+ tiles of
  // 64): partial column tiles, a partial K tile, bias, accumulation, strided x and out.
  AddGemm(seed, {.m = 9, .n = 300, .k = 1024, .bias = true}, out);
  AddGemm(seed, {.m = 64, .n = 260, .k = 2048, .accumulate = true}, out);
  AddGemm(seed, {.m = 33, .n = 130, .k = 512, .bias = true, .x_stride = 520, .out_stride = 136},
          out);
  AddGemm(seed, {.m = 24, .n = 1000, .k = 72}, out);
  AddGemmNegative(seed, out);
}

void AddRopeCases(uint64_t seed, CaseList* out) {
  AddRope(seed, MakeRope(9, 4, 2, 64, 32), out);
  RopeSpec long_context = MakeRope(17, 8, 8, 128, 64, 4096);
  long_context.theta = 500000;
  AddRope(seed, long_context, out);
  RopeSpec partial = MakeRope(6, 4, 1, 128, 32, 2048);  // partial rotary, YaRN-style mscale
  partial.mscale = 1.25f;
  AddRope(seed, partial, out);
  AddRope(seed, MakeRope(5, 2, 0, 64, 32), out);  // k NULL
  RopeSpec fused = MakeRope(7, 4, 2, 64, 32, 1024);
  fused.fused = true;
  AddRope(seed, fused, out);
  RopeSpec strided = MakeRope(4, 2, 2, 32, 16);
  strided.q_stride = 96;
  strided.k_stride = 72;
  AddRope(seed, strided, out);
  AddRope(seed, MakeRope(3, 2, 2, 80, 40), out);
}

void AddSiluMulCases(uint64_t seed, CaseList* out) {
  AddSiluMul(seed, 1, 16, out);
  AddSiluMul(seed, 13, 64, out);
  AddSiluMul(seed, 3, 1000, out);
}

void AddGatherRowsCases(uint64_t seed, CaseList* out) {
  AddGatherRows(seed, 1, 32, 1, out);
  AddGatherRows(seed, 20, 64, 5, out);
  AddGatherRows(seed, 50, 200, 50, out);
}

}  // namespace strata::conformance
