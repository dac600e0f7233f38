// Conformance cases for the KV cache ops: kv_append, kv_copy_blocks, kv_gather, kv_scatter, and
// the optional attention_prologue (q/k norms + rope + kv_append).
// The whole pool is compared after each op, so writes to the wrong block, layer or K/V half
// show up as mismatches.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness.h"

namespace strata::conformance {
namespace {

std::string Describe(const KvShape& s) {
  return absl::StrFormat("blocks=%d layers=%d bs=%d Hk=%d D=%d", s.num_blocks, s.num_layers,
                         s.block_size, s.num_kv_heads, s.head_dim);
}

struct AppendSpec {
  KvShape shape;
  int32_t layer;
  int64_t tokens;
  int64_t skipped;     // rows whose slot is negative
  bool fused = false;  // k and v are slices of a fused QKV buffer [T, (2 Hk + Hk + Hk) * D]
};

void AddKvAppend(uint64_t seed, const AppendSpec& s, CaseList* out) {
  std::string name = absl::StrCat(Describe(s.shape), " layer=", s.layer, " T=", s.tokens);
  if (s.skipped > 0) absl::StrAppend(&name, " skip=", s.skipped);
  if (s.fused) absl::StrAppend(&name, " fused-qkv");
  CaseBuilder cb(seed, "kv_append", name);
  const int64_t hk = s.shape.num_kv_heads, dim = s.shape.head_dim;
  std::vector<int32_t> slots = cb.rng().Permutation(s.shape.num_blocks * s.shape.block_size);
  slots.resize(s.tokens);
  for (int64_t i = 0; i < s.skipped; ++i) slots[cb.rng().Int(0, s.tokens - 1)] = -1;
  const int64_t row = s.fused ? 4 * hk * dim : 0;
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, s.shape.Elems()));
  const int k =
      cb.Uniform(s.fused ? "qkv" : "k", Role::kAct, s.tokens * (s.fused ? row : hk * dim));
  const int v = s.fused ? k : cb.Uniform("v", Role::kAct, s.tokens * hk * dim);
  const int sl = cb.Ints("slots", slots);
  out->push_back(cb.Build([=](OpContext& ctx) {
    const strata_kv_cache c = ctx.Cache(cache, s.shape);
    strata_tensor kt = ctx.Tensor(k, {s.tokens, hk, dim}, row, s.fused ? 2 * hk * dim : 0);
    strata_tensor vt = ctx.Tensor(v, {s.tokens, hk, dim}, row, s.fused ? 3 * hk * dim : 0);
    strata_tensor st = ctx.Tensor(sl, {s.tokens});
    return ctx.Check(ctx.api().kv_append(ctx.backend(), ctx.stream(), &c, s.layer, &kt, &vt, &st),
                     "kv_append");
  }));
}

// A layer past the pool's last: the op must refuse. Every slot is negative, so an op that
// does not check writes nothing and fails only this case.
void AddKvAppendNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "kv_append", "rejects a layer out of range");
  const KvShape shape{4, 2, 8, 2, 32};
  const int cache = cb.Uniform("cache", Role::kKv, shape.Elems());
  const int k = cb.Uniform("k", Role::kAct, 3 * 2 * 32);
  const int sl = cb.Ints("slots", {-1, -1, -1});
  out->push_back(cb.BuildNegative(
      [=](OpContext& ctx) {
        const strata_kv_cache c = ctx.Cache(cache, shape);
        strata_tensor kt = ctx.Tensor(k, {3, 2, 32});
        strata_tensor st = ctx.Tensor(sl, {3});
        return ctx.Check(
            ctx.api().kv_append(ctx.backend(), ctx.stream(), &c, shape.num_layers, &kt, &kt, &st),
            "kv_append");
      },
      STRATA_ERR_INVALID_ARGUMENT));
}

// src and dst are disjoint, so the order of the copies does not matter.
void AddKvCopyBlocks(uint64_t seed, const KvShape& shape, int32_t n, CaseList* out) {
  CaseBuilder cb(seed, "kv_copy_blocks", absl::StrCat(Describe(shape), " n=", n));
  const std::vector<int32_t> perm = cb.rng().Permutation(shape.num_blocks);
  const std::vector<int32_t> src(perm.begin(), perm.begin() + n);
  const std::vector<int32_t> dst(perm.begin() + n, perm.begin() + 2 * n);
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, shape.Elems()));
  const int s = cb.Ints("src_blocks", src);
  const int d = cb.Ints("dst_blocks", dst);
  out->push_back(cb.Build([=](OpContext& ctx) {
    const strata_kv_cache c = ctx.Cache(cache, shape);
    strata_tensor st = ctx.Tensor(s, {n});
    strata_tensor dt = ctx.Tensor(d, {n});
    return ctx.Check(ctx.api().kv_copy_blocks(ctx.backend(), ctx.stream(), &c, &st, &dt),
                     "kv_copy_blocks");
  }));
}

void AddKvGather(uint64_t seed, const KvShape& shape, int32_t n, CaseList* out) {
  CaseBuilder cb(seed, "kv_gather", absl::StrCat(Describe(shape), " n=", n));
  std::vector<int32_t> blocks = cb.rng().Permutation(shape.num_blocks);
  blocks.resize(n);
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, shape.Elems()));
  const int b = cb.Ints("blocks", blocks);
  const int dst = cb.Output(cb.Uniform("dst", Role::kKv, n * shape.BlockElems()));
  out->push_back(cb.Build([=](OpContext& ctx) {
    const strata_kv_cache c = ctx.Cache(cache, shape);
    strata_tensor bt = ctx.Tensor(b, {n});
    return ctx.Check(ctx.api().kv_gather(ctx.backend(), ctx.stream(), &c, &bt, ctx.Ptr(dst)),
                     "kv_gather");
  }));
}

void AddKvScatter(uint64_t seed, const KvShape& shape, int32_t n, CaseList* out) {
  CaseBuilder cb(seed, "kv_scatter", absl::StrCat(Describe(shape), " n=", n));
  std::vector<int32_t> blocks = cb.rng().Permutation(shape.num_blocks);
  blocks.resize(n);
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, shape.Elems()));
  const int b = cb.Ints("blocks", blocks);
  const int src = cb.Uniform("src", Role::kKv, n * shape.BlockElems());
  out->push_back(cb.Build([=](OpContext& ctx) {
    const strata_kv_cache c = ctx.Cache(cache, shape);
    strata_tensor bt = ctx.Tensor(b, {n});
    return ctx.Check(ctx.api().kv_scatter(ctx.backend(), ctx.stream(), &c, &bt, ctx.Ptr(src)),
                     "kv_scatter");
  }));
}

// kv_gather of some blocks, then kv_scatter of the packed buffer into other blocks: what a KV
// transfer between two workers does. The destination blocks must equal the source blocks.
void AddKvRoundTrip(uint64_t seed, const KvShape& shape, int32_t n, CaseList* out) {
  CaseBuilder cb(seed, "kv_scatter",
                 absl::StrCat("gather+scatter round trip ", Describe(shape), " n=", n));
  const std::vector<int32_t> perm = cb.rng().Permutation(shape.num_blocks);
  const std::vector<int32_t> from(perm.begin(), perm.begin() + n);
  const std::vector<int32_t> to(perm.begin() + n, perm.begin() + 2 * n);
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, shape.Elems()));
  const int f = cb.Ints("gather_blocks", from);
  const int t = cb.Ints("scatter_blocks", to);
  const int buf = cb.Output(cb.Uniform("packed", Role::kKv, n * shape.BlockElems()));
  out->push_back(cb.Build([=](OpContext& ctx) {
    const strata_kv_cache c = ctx.Cache(cache, shape);
    strata_tensor ft = ctx.Tensor(f, {n});
    strata_tensor tt = ctx.Tensor(t, {n});
    absl::Status st = ctx.Check(
        ctx.api().kv_gather(ctx.backend(), ctx.stream(), &c, &ft, ctx.Ptr(buf)), "kv_gather");
    if (!st.ok()) return st;
    return ctx.Check(ctx.api().kv_scatter(ctx.backend(), ctx.stream(), &c, &tt, ctx.Ptr(buf)),
                     "kv_scatter");
  }));
}

// attention_prologue: q (or the fused QKV buffer), k and the whole pool are compared.
struct PrologueSpec {
  KvShape shape;
  int32_t layer;
  int64_t tokens, q_heads, rotary_half;
  bool norms;
  bool fused = false;  // q, k and v are slices of one [T, (Hq + 2 Hk) * D] QKV buffer
  int64_t skipped = 0;
  float mscale = 1.0f;
};

void AddAttentionPrologue(uint64_t seed, const PrologueSpec& s, CaseList* out) {
  const int64_t hk = s.shape.num_kv_heads, d = s.shape.head_dim, hq = s.q_heads;
  std::string name = absl::StrCat(Describe(s.shape), " layer=", s.layer, " T=", s.tokens,
                                  " Hq=", hq, " R=", s.rotary_half);
  if (s.norms) absl::StrAppend(&name, " qk-norm");
  if (s.fused) absl::StrAppend(&name, " fused-qkv");
  if (s.skipped > 0) absl::StrAppend(&name, " skip=", s.skipped);
  if (s.mscale != 1.0f) absl::StrAppend(&name, " mscale=", s.mscale);
  CaseBuilder cb(seed, "attention_prologue", name);
  std::vector<int32_t> slots = cb.rng().Permutation(s.shape.num_blocks * s.shape.block_size);
  slots.resize(s.tokens);
  for (int64_t i = 0; i < s.skipped; ++i) slots[cb.rng().Int(0, s.tokens - 1)] = -1;
  std::vector<int32_t> positions(s.tokens);
  for (auto& p : positions) p = cb.rng().Int(0, 4095);
  std::vector<float> inv_freq(s.rotary_half);
  for (int64_t i = 0; i < s.rotary_half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -static_cast<double>(i) / s.rotary_half));
  }
  const int64_t row = (hq + 2 * hk) * d;
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, s.shape.Elems()));
  const int q =
      cb.Output(cb.Uniform(s.fused ? "qkv" : "q", Role::kAct, s.tokens * (s.fused ? row : hq * d)));
  const int k = s.fused ? q : cb.Output(cb.Uniform("k", Role::kAct, s.tokens * hk * d));
  const int v = s.fused ? q : cb.Uniform("v", Role::kAct, s.tokens * hk * d);
  const int qn = s.norms ? cb.Uniform("q_norm", Role::kWeight, d) : -1;
  const int kn = s.norms ? cb.Uniform("k_norm", Role::kWeight, d) : -1;
  const int pos = cb.Ints("positions", positions);
  const int freq = cb.Values("inv_freq", Role::kF32, inv_freq);
  const int sl = cb.Ints("slots", slots);
  TestCase c = cb.Build([=](OpContext& ctx) {
    const strata_kv_cache cc = ctx.Cache(cache, s.shape);
    const int64_t stride = s.fused ? row : 0;
    strata_tensor qt = ctx.Tensor(q, {s.tokens, hq, d}, stride);
    strata_tensor kt = ctx.Tensor(k, {s.tokens, hk, d}, stride, s.fused ? hq * d : 0);
    strata_tensor vt = ctx.Tensor(v, {s.tokens, hk, d}, stride, s.fused ? (hq + hk) * d : 0);
    strata_tensor qnt = s.norms ? ctx.Tensor(qn, {d}) : strata_tensor{};
    strata_tensor knt = s.norms ? ctx.Tensor(kn, {d}) : strata_tensor{};
    strata_tensor pt = ctx.Tensor(pos, {s.tokens});
    strata_tensor ft = ctx.Tensor(freq, {s.rotary_half});
    strata_tensor st = ctx.Tensor(sl, {s.tokens});
    return ctx.Check(ctx.api().attention_prologue(
                         ctx.backend(), ctx.stream(), &qt, &kt, &vt, s.norms ? &qnt : nullptr,
                         s.norms ? &knt : nullptr, 1e-6f, &pt, &ft, s.mscale, &cc, s.layer, &st),
                     "attention_prologue");
  });
  c.needs_entry = "attention_prologue";
  out->push_back(std::move(c));
}

// One norm without the other: the op must refuse (and write nothing: the pool is an output of
// the positive cases only, so this checks the error).
void AddAttentionPrologueNegative(uint64_t seed, CaseList* out) {
  CaseBuilder cb(seed, "attention_prologue", "rejects q_norm without k_norm");
  const KvShape shape{4, 2, 8, 2, 32};
  const int cache = cb.Uniform("cache", Role::kKv, shape.Elems());
  const int q = cb.Uniform("q", Role::kAct, 3 * 4 * 32);
  const int k = cb.Uniform("k", Role::kAct, 3 * 2 * 32);
  const int qn = cb.Uniform("q_norm", Role::kWeight, 32);
  const int pos = cb.Ints("positions", {0, 1, 2});
  const int freq = cb.Values("inv_freq", Role::kF32, {1.0f, 0.5f});
  const int sl = cb.Ints("slots", {0, 1, 2});
  TestCase c = cb.BuildNegative(
      [=](OpContext& ctx) {
        const strata_kv_cache cc = ctx.Cache(cache, shape);
        strata_tensor qt = ctx.Tensor(q, {3, 4, 32});
        strata_tensor kt = ctx.Tensor(k, {3, 2, 32});
        strata_tensor qnt = ctx.Tensor(qn, {32});
        strata_tensor pt = ctx.Tensor(pos, {3});
        strata_tensor ft = ctx.Tensor(freq, {2});
        strata_tensor st = ctx.Tensor(sl, {3});
        return ctx.Check(
            ctx.api().attention_prologue(ctx.backend(), ctx.stream(), &qt, &kt, &kt, &qnt, nullptr,
                                         1e-6f, &pt, &ft, 1.0f, &cc, 0, &st),
            "attention_prologue");
      },
      STRATA_ERR_INVALID_ARGUMENT);
  c.needs_entry = "attention_prologue";
  out->push_back(std::move(c));
}

}  // namespace

void AddAttentionPrologueCases(uint64_t seed, CaseList* out) {
  // Qwen3-style (q/k norms, full rotary, GQA 4:1) with skipped rows; Llama-style from a fused
  // QKV buffer; partial rotary with a YaRN-like mscale; a prefill-sized call.
  AddAttentionPrologue(seed, {{8, 2, 4, 2, 128}, 1, 5, 8, 64, true, false, 1}, out);
  AddAttentionPrologue(seed, {{6, 3, 8, 2, 64}, 2, 3, 8, 32, false, true}, out);
  AddAttentionPrologue(seed, {{4, 1, 16, 1, 64}, 0, 9, 2, 16, true, false, 0, 1.25f}, out);
  AddAttentionPrologue(seed, {{16, 2, 16, 4, 64}, 0, 60, 4, 32, true, true, 4}, out);
  AddAttentionPrologueNegative(seed, out);
}

void AddKvAppendCases(uint64_t seed, CaseList* out) {
  AddKvAppend(seed, {{4, 1, 8, 1, 128}, 0, 1, 0}, out);
  AddKvAppend(seed, {{8, 3, 16, 2, 64}, 1, 40, 5}, out);
  AddKvAppend(seed, {{6, 2, 32, 4, 32}, 1, 100, 3, true}, out);
  AddKvAppend(seed, {{64, 2, 1, 2, 64}, 1, 20, 0}, out);
  AddKvAppendNegative(seed, out);
}

void AddKvCopyBlocksCases(uint64_t seed, CaseList* out) {
  AddKvCopyBlocks(seed, {10, 2, 16, 2, 64}, 3, out);
  AddKvCopyBlocks(seed, {32, 4, 8, 1, 128}, 12, out);
}

void AddKvGatherCases(uint64_t seed, CaseList* out) {
  AddKvGather(seed, {10, 2, 16, 2, 64}, 3, out);
  AddKvGather(seed, {40, 3, 16, 4, 128}, 17, out);
}

void AddKvScatterCases(uint64_t seed, CaseList* out) {
  AddKvScatter(seed, {10, 2, 16, 2, 64}, 3, out);
  AddKvScatter(seed, {40, 3, 16, 4, 128}, 17, out);
  AddKvRoundTrip(seed, {24, 2, 16, 2, 64}, 9, out);
}

}  // namespace strata::conformance
