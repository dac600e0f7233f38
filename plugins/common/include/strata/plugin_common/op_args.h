#pragma once
// Argument checks of the ops whose descriptor rules are the same in every in-tree plugin (MoE,
// kv_append), parameterized by the float dtype the plugin stores. They validate descriptors
// only; index *values* (topk_ids, slots) are the plugin's business: the CPU plugin reads them,
// a GPU plugin bounds-checks them in its kernels.
#include <cstdint>

#include "strata/plugin/abi.h"
#include "strata/plugin_common/status.h"
#include "strata/plugin_common/tensor.h"

namespace strata::plugin_common {

// moe_route: router_logits [T, E] (float dtype), topk_weights F32 [T, k], topk_ids I32 [T, k].
struct MoeRouteArgs {
  TensorView logits, weights, ids;
  int64_t experts = 0;
};
Status CheckMoeRoute(strata_dtype float_dtype, const strata_tensor* router_logits, int32_t top_k,
                     const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                     MoeRouteArgs* args);

// moe_experts: x, out [T, H]; topk_weights F32 / topk_ids I32 [T, k]; w_gate_up [E, 2I, H];
// w_down [E, H, I]; out must not overlap x; H, 2I and T * k fit in an int.
struct MoeExpertsArgs {
  TensorView x, weights, ids, gate_up, down, out;
  int64_t experts = 0, hidden = 0, inter = 0, top_k = 0;
};
Status CheckMoeExperts(strata_dtype float_dtype, const strata_tensor* x,
                       const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                       const strata_tensor* w_gate_up, const strata_tensor* w_down,
                       strata_tensor* out, MoeExpertsArgs* args);

// moe_route_experts: moe_route's and moe_experts' checks (reported under the fused op's name),
// router_logits with one column per expert, and out overlapping none of the other tensors.
Status CheckMoeRouteExperts(strata_dtype float_dtype, const strata_tensor* x,
                            const strata_tensor* router_logits, int32_t top_k,
                            const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                            const strata_tensor* w_gate_up, const strata_tensor* w_down,
                            strata_tensor* out, MoeRouteArgs* route, MoeExpertsArgs* experts);

// kv_append: layer in range, k and v [T, Hk, D] matching the pool, slots I32 [T].
struct KvAppendArgs {
  CacheView cache;
  TensorView k, v, slots;
};
Status CheckKvAppend(strata_dtype float_dtype, const strata_kv_cache* cache, int32_t layer,
                     const strata_tensor* k, const strata_tensor* v, const strata_tensor* slots,
                     KvAppendArgs* args);

// attention_prologue: q [T, Hq, D] and, through CheckKvAppend, k / v / slots / cache / layer;
// q_norm and k_norm [D] both or neither; positions I32 [T]; inv_freq F32 [R] with 2 R <= D.
struct AttentionPrologueArgs {
  TensorView q, q_norm, k_norm, positions, inv_freq;
  KvAppendArgs kv;
  bool norms = false;
};
Status CheckAttentionPrologue(strata_dtype float_dtype, const strata_tensor* q,
                              const strata_tensor* k, const strata_tensor* v,
                              const strata_tensor* q_norm, const strata_tensor* k_norm,
                              const strata_tensor* positions, const strata_tensor* inv_freq,
                              const strata_kv_cache* cache, int32_t layer,
                              const strata_tensor* slots, AttentionPrologueArgs* args);

// gemm_silu_mul: x [T, H] (any row stride), w_gate_up [2I, H], bias [2I] or NULL, scratch
// [T, 2I] and out [T, I] dense; out and scratch overlap none of the inputs nor each other.
struct GemmSiluMulArgs {
  TensorView x, w, bias, scratch, out;
  bool has_bias = false;
  int64_t inter = 0;  // I
};
Status CheckGemmSiluMul(strata_dtype float_dtype, const strata_tensor* x,
                        const strata_tensor* w_gate_up, const strata_tensor* bias,
                        const strata_tensor* scratch, const strata_tensor* out,
                        GemmSiluMulArgs* args);

// sample: logits [N, V] in F32 or `act_dtype`, params non-NULL, tokens I32 [N]; logprobs F32
// [N, 1 + STRATA_MAX_LOGPROBS] and top_ids I32 [N, STRATA_MAX_LOGPROBS], both or neither.
struct SampleArgs {
  TensorView logits, tokens, logprobs, top_ids;
  bool has_logprobs = false;
};
Status CheckSample(strata_dtype act_dtype, const strata_tensor* logits,
                   const strata_sample_params* params, const strata_tensor* tokens,
                   const strata_tensor* logprobs, const strata_tensor* top_ids, SampleArgs* args);
// One row's parameters (host-addressable memory only), in the ranges abi.h gives.
Status CheckSampleParams(const strata_sample_params& p, int64_t row);

// mask_logits: logits [N, V] in F32 or `act_dtype`, rows I32 [n] (dense), masks I32 [n, W]
// with W = ceil(V / 32); masks overlap neither logits nor rows. Values are not read.
struct MaskLogitsArgs {
  TensorView logits, rows, masks;
  int64_t words = 0;  // W
};
Status CheckMaskLogits(strata_dtype act_dtype, const strata_tensor* logits,
                       const strata_tensor* rows, const strata_tensor* masks, MaskLogitsArgs* args);

// A 1-D I32 list of block ids (kv_copy_blocks, kv_gather, kv_scatter).
Status ViewBlockList(const char* op, const char* name, const strata_tensor* t, TensorView* view);

// Where the index arrays an op reads live: a plugin whose device memory is host memory checks
// their values up front (kHost); a GPU plugin leaves them to its kernels (kDevice).
enum class IndexValues { kHost, kDevice };

// embedding: table [V, H], ids I32 [T], out [T, H]; with kHost every id lies in [0, V).
struct EmbeddingArgs {
  TensorView table, ids, out;
};
Status CheckEmbedding(strata_dtype float_dtype, IndexValues values, const strata_tensor* table,
                      const strata_tensor* ids, const strata_tensor* out, EmbeddingArgs* args);

// gather_rows: x [N, ...] (rank 2 or 3), rows I32 [T], out [T, ...] of x's rank and trailing
// dims; with kHost every row id lies in [0, N).
struct GatherRowsArgs {
  TensorView x, rows, out;
};
Status CheckGatherRows(strata_dtype float_dtype, IndexValues values, const strata_tensor* x,
                       const strata_tensor* rows, const strata_tensor* out, GatherRowsArgs* args);

// rms_norm: x and out [T, (heads,) D] of one shape, weight [D], residual NULL or x's shape,
// eps >= 0.
struct RmsNormArgs {
  TensorView x, residual, weight, out;
  bool has_residual = false;
  int64_t d = 0;  // the normalized dimension (x's last)
};
Status CheckRmsNorm(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* residual,
                    const strata_tensor* weight, float eps, const strata_tensor* out,
                    RmsNormArgs* args);

// rope: q [T, Hq, D], positions I32 [T], inv_freq F32 [R] with 2 R <= D, k NULL or [T, Hk, D]
// and not q itself.
struct RopeArgs {
  TensorView q, k, positions, inv_freq;
  bool has_k = false;
};
Status CheckRope(strata_dtype float_dtype, const strata_tensor* q, const strata_tensor* k,
                 const strata_tensor* positions, const strata_tensor* inv_freq, RopeArgs* args);

// silu_mul: x [T, 2I], out [T, I].
struct SiluMulArgs {
  TensorView x, out;
  int64_t inter = 0;  // I
};
Status CheckSiluMul(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* out,
                    SiluMulArgs* args);

// gemm: x [M, (..,) K], w [N, K], out [M, (..,) N], bias NULL or [N]; out overlaps no input.
struct GemmArgs {
  TensorView x, w, bias, out;
  bool has_bias = false;
  int64_t m = 0, n = 0, k = 0;
};
Status CheckGemm(strata_dtype float_dtype, const strata_tensor* x, const strata_tensor* w,
                 const strata_tensor* bias, const strata_tensor* out, GemmArgs* args);

// attention_prefill / attention_decode (reported under `op`): the pool, params (layer in
// range, sliding_window >= 0), q and out [T, Hq, D] of one shape with D the pool's head_dim
// and Hq a positive multiple of its kv heads.
struct AttentionViews {
  CacheView cache;
  TensorView q, out;
  int64_t q_heads = 0;
};
Status CheckAttention(const char* op, strata_dtype float_dtype, const strata_kv_cache* cache,
                      const strata_attention_params* params, const strata_tensor* q,
                      const strata_tensor* out, AttentionViews* args);
// The batch descriptor itself: non-NULL, counts >= 0, and with sequences its arrays non-NULL.
// The arrays' values are the plugin's business, like other index values.
Status CheckAttentionBatch(const char* op, const strata_attention_batch* batch);

// kv_copy_blocks: src_blocks and dst_blocks I32 [N]; kv_gather (kv_scatter): blocks I32 [N]
// and dst (src) non-NULL when N > 0. With kHost every block id lies in the pool.
struct KvBlocksArgs {
  CacheView cache;
  TensorView src, dst;  // kv_gather / kv_scatter: the block list in `src`
};
Status CheckKvCopyBlocks(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                         const strata_tensor* src, const strata_tensor* dst, KvBlocksArgs* args);
Status CheckKvGather(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                     const strata_tensor* blocks, const void* dst, KvBlocksArgs* args);
Status CheckKvScatter(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                      const strata_tensor* blocks, const void* src, KvBlocksArgs* args);

}  // namespace strata::plugin_common
