// Conformance cases for paged attention: attention_prefill and attention_decode over batches
// of sequences with cached prefixes, scattered block tables, GQA and sliding windows.
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness.h"

namespace strata::conformance {
namespace {

struct SeqLens {
  int32_t q_len;
  int32_t kv_len;  // cached prefix + q_len new tokens
};

struct AttentionSpec {
  std::string name;
  std::vector<SeqLens> seqs;
  int32_t q_heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  int32_t sliding_window = 0;
  int32_t max_kv_hint = 0;  // batch.max_kv_len when > the longest context (a graph bucket)
  float scale = 0;          // 0: 1/sqrt(head_dim)
  bool fused_q = false;     // q is the q slice of a fused [T, (Hq + 2 Hk) * D] QKV buffer
};

constexpr int32_t kLayers = 2;  // the cases attend over layer 1, so layer offsets matter
constexpr int32_t kLayer = 1;

// Block tables with every sequence's blocks scattered over a pool with spare blocks; entries
// past a sequence's last block hold other valid block ids, so reading them shows.
struct PagedLayout {
  KvShape shape;
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;
};

PagedLayout LayoutFor(const AttentionSpec& s, Rng& rng) {
  PagedLayout layout;
  int32_t total = 0;
  for (const SeqLens& q : s.seqs) {
    const int32_t blocks = (q.kv_len + s.block_size - 1) / s.block_size;
    layout.max_blocks_per_seq = std::max(layout.max_blocks_per_seq, blocks + 1);
    total += blocks;
  }
  layout.max_blocks_per_seq =
      std::max(layout.max_blocks_per_seq, (s.max_kv_hint + s.block_size - 1) / s.block_size);
  layout.shape = {total + 3, kLayers, s.block_size, s.kv_heads, s.head_dim};
  const std::vector<int32_t> pool = rng.Permutation(layout.shape.num_blocks);
  int32_t next = 0;
  for (const SeqLens& q : s.seqs) {
    const int32_t blocks = (q.kv_len + s.block_size - 1) / s.block_size;
    for (int32_t i = 0; i < layout.max_blocks_per_seq; ++i) {
      layout.block_tables.push_back(i < blocks ? pool[next++]
                                               : rng.Int(0, layout.shape.num_blocks - 1));
    }
  }
  return layout;
}

void AddAttention(uint64_t seed, const char* op, const AttentionSpec& s, CaseList* out) {
  const bool decode = std::string(op) == "attention_decode";
  CaseBuilder cb(seed, op, s.name);
  const PagedLayout layout = LayoutFor(s, cb.rng());
  std::vector<int32_t> q_start = {0}, kv_len;
  int32_t max_q = 0, max_kv = 0;
  for (const SeqLens& q : s.seqs) {
    q_start.push_back(q_start.back() + q.q_len);
    kv_len.push_back(q.kv_len);
    max_q = std::max(max_q, q.q_len);
    max_kv = std::max(max_kv, q.kv_len);
  }
  max_kv = std::max(max_kv, s.max_kv_hint);
  const int64_t tokens = q_start.back(), q_cols = int64_t{s.q_heads} * s.head_dim;
  const int64_t q_row = s.fused_q ? int64_t{s.q_heads + 2 * s.kv_heads} * s.head_dim : 0;
  // Larger queries than keys make the softmax peaked enough for masking errors to show.
  const int q = cb.Uniform("q", Role::kAct, tokens * (q_row ? q_row : q_cols), -4, 4);
  const int cache = cb.Output(cb.Uniform("cache", Role::kKv, layout.shape.Elems()));
  const int y = cb.Output(cb.Uniform("out", Role::kAct, tokens * q_cols));
  const int qs = cb.Ints("q_start", q_start);
  const int kvl = cb.Ints("kv_len", kv_len);
  const int bt = cb.Ints("block_tables", layout.block_tables);
  const int32_t num_seqs = static_cast<int32_t>(s.seqs.size());
  const int32_t mbps = layout.max_blocks_per_seq;
  const KvShape shape = layout.shape;
  const float scale = s.scale != 0 ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  out->push_back(
      cb.Build([=, window = s.sliding_window, hq = s.q_heads, hd = s.head_dim](OpContext& ctx) {
        const strata_kv_cache c = ctx.Cache(cache, shape);
        const strata_attention_batch batch{num_seqs,     mbps,          max_q,       max_kv,
                                           ctx.Ints(qs), ctx.Ints(kvl), ctx.Ints(bt)};
        const strata_attention_params params{kLayer, scale, window};
        strata_tensor qt = ctx.Tensor(q, {tokens, hq, hd}, q_row);
        strata_tensor ot = ctx.Tensor(y, {tokens, hq, hd});
        const auto fn = decode ? ctx.api().attention_decode : ctx.api().attention_prefill;
        return ctx.Check(fn(ctx.backend(), ctx.stream(), &c, &batch, &params, &qt, &ot),
                         decode ? "attention_decode" : "attention_prefill");
      }));
}

AttentionSpec Spec(std::string name, std::vector<SeqLens> seqs, int32_t q_heads, int32_t kv_heads,
                   int32_t head_dim, int32_t block_size) {
  AttentionSpec spec;
  spec.name = std::move(name);
  spec.seqs = std::move(seqs);
  spec.q_heads = q_heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.block_size = block_size;
  return spec;
}

// One query row per sequence, whose context holds `contexts[s]` tokens.
AttentionSpec Decode(std::string name, const std::vector<int32_t>& contexts, int32_t q_heads,
                     int32_t kv_heads, int32_t head_dim, int32_t block_size) {
  std::vector<SeqLens> seqs;
  for (int32_t kv : contexts) seqs.push_back({1, kv});
  return Spec(std::move(name), std::move(seqs), q_heads, kv_heads, head_dim, block_size);
}

}  // namespace

void AddAttentionPrefillCases(uint64_t seed, CaseList* out) {
  const char* op = "attention_prefill";
  AddAttention(seed, op, Spec("1 seq q=kv=37 H=4/4 D=64 bs=16", {{37, 37}}, 4, 4, 64, 16), out);
  AddAttention(seed, op,
               Spec("4 seqs cached prefixes H=8/2 D=128 bs=16",
                    {{5, 5}, {17, 50}, {1, 33}, {64, 64}}, 8, 2, 128, 16),
               out);
  AddAttention(seed, op,
               Spec("3 seqs H=8/1 D=64 bs=32", {{20, 100}, {3, 3}, {40, 72}}, 8, 1, 64, 32), out);
  AttentionSpec window = Spec("3 seqs sliding window 16 H=4/2 D=64 bs=16",
                              {{30, 30}, {10, 80}, {1, 40}}, 4, 2, 64, 16);
  window.sliding_window = 16;
  AddAttention(seed, op, window, out);
  AttentionSpec fused =
      Spec("2 seqs fused qkv scale=0.1 H=4/2 D=64 bs=8", {{12, 12}, {7, 25}}, 4, 2, 64, 8);
  fused.scale = 0.1f;
  fused.fused_q = true;
  AddAttention(seed, op, fused, out);
  AddAttention(seed, op, Spec("1 seq q=192 kv=512 H=4/2 D=128 bs=16", {{192, 512}}, 4, 2, 128, 16),
               out);
  // Blocks as long as a GPU kernel's 64-key tile, and longer (a tile starts inside a block),
  // and shorter than a copy engine's 8-row swizzle atom: each block size takes its own load
  // path in a GPU plugin.
  AddAttention(seed, op, Spec("2 seqs H=8/2 D=128 bs=64", {{100, 300}, {70, 70}}, 8, 2, 128, 64),
               out);
  AddAttention(seed, op, Spec("2 seqs H=4/2 D=64 bs=128", {{150, 400}, {20, 130}}, 4, 2, 64, 128),
               out);
  AddAttention(seed, op, Spec("1 seq H=4/1 D=128 bs=4", {{50, 90}}, 4, 1, 128, 4), out);
}

void AddAttentionDecodeCases(uint64_t seed, CaseList* out) {
  const char* op = "attention_decode";
  AddAttention(seed, op, Decode("batch 1 ctx 1 H=4/4 D=64 bs=16", {1}, 4, 4, 64, 16), out);
  AddAttention(seed, op,
               Decode("batch 4 ctx 1..300 H=8/2 D=128 bs=16", {1, 17, 128, 300}, 8, 2, 128, 16),
               out);
  AddAttention(
      seed, op,
      Decode("batch 3 ctx 2000..4096 H=8/2 D=128 bs=16", {4096, 2000, 3333}, 8, 2, 128, 16), out);
  std::vector<int32_t> contexts;
  Rng rng(seed);
  for (int i = 0; i < 16; ++i) contexts.push_back(rng.Int(100, 600));
  AddAttention(seed, op, Decode("batch 16 ctx 100..600 H=8/1 D=64 bs=32", contexts, 8, 1, 64, 32),
               out);
  AttentionSpec window =
      Decode("batch 3 sliding window 256 H=4/2 D=128 bs=16", {1000, 200, 700}, 4, 2, 128, 16);
  window.sliding_window = 256;
  AddAttention(seed, op, window, out);
  AttentionSpec fused = Decode("batch 2 fused qkv H=4/2 D=64 bs=16", {50, 75}, 4, 2, 64, 16);
  fused.fused_q = true;
  AddAttention(seed, op, fused, out);
  // Planned for a longer context than any sequence has, as graph replay plans for its context
  // bucket: each sequence's splits are sized from its own length.
  AttentionSpec bucket = Decode("batch 4 ctx 1..2049 planned for 4096 H=8/2 D=128 bs=16",
                                {2049, 1, 700, 1500}, 8, 2, 128, 16);
  bucket.max_kv_hint = 4096;
  AddAttention(seed, op, bucket, out);
  // The served batch-1 step at 2k (Qwen3-30B-A3B's heads): a GPU plugin's short split plan,
  // whose splits may merge in a thread-block cluster instead of a combine kernel.
  AttentionSpec one =
      Decode("batch 1 ctx 2049 planned for 4096 H=32/4 D=128 bs=16", {2049}, 32, 4, 128, 16);
  one.max_kv_hint = 4096;
  AddAttention(seed, op, one, out);
  // Longer than 4,096 keys at a small batch: a GPU plugin's split plan on 4-warp CTAs (shorter
  // split plans run 8-warp CTAs).
  AddAttention(seed, op,
               Decode("batch 2 ctx 4500..6000 H=8/2 D=128 bs=16", {6000, 4500}, 8, 2, 128, 16),
               out);
  // 128 (sequence, kv head) items: on a 132-SM GPU one wave of unsplit 8-warp CTAs.
  contexts.clear();
  for (int i = 0; i < 32; ++i) contexts.push_back(rng.Int(200, 700));
  AddAttention(seed, op, Decode("batch 32 ctx 200..700 H=8/4 D=128 bs=16", contexts, 8, 4, 128, 16),
               out);
}

}  // namespace strata::conformance
