#include "strata/plugin_common/op_args.h"

#include <climits>
#include <cmath>
#include <cstdint>

namespace strata::plugin_common {

namespace {

// moe_route's checks, reported under `kOp` (moe_route, or moe_route_experts that stands for it).
Status CheckRoute(const char* kOp, strata_dtype float_dtype, const strata_tensor* router_logits,
                  int32_t top_k, const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                  MoeRouteArgs* a) {
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "router_logits", router_logits, float_dtype, 2, 2, &a->logits));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_weights", topk_weights, STRATA_DTYPE_F32, 2, 2, &a->weights));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_ids", topk_ids, STRATA_DTYPE_I32, 2, 2, &a->ids));
  a->experts = a->logits.shape[1];
  if (top_k < 1 || top_k > a->experts) {
    return InvalidArgument(kOp, "top_k ", top_k, " is out of range [1, ", a->experts, "]");
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "topk_weights", a->weights, 0, a->logits.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "topk_weights", a->weights, 1, top_k));
  return ExpectShape(kOp, "topk_ids", a->ids, "topk_weights", a->weights);
}

}  // namespace

Status CheckMoeRoute(strata_dtype float_dtype, const strata_tensor* router_logits, int32_t top_k,
                     const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                     MoeRouteArgs* a) {
  return CheckRoute("moe_route", float_dtype, router_logits, top_k, topk_weights, topk_ids, a);
}

Status CheckSample(strata_dtype act_dtype, const strata_tensor* logits,
                   const strata_sample_params* params, const strata_tensor* tokens,
                   const strata_tensor* logprobs, const strata_tensor* top_ids, SampleArgs* a) {
  constexpr const char* kOp = "sample";
  const strata_dtype ldt =
      logits != nullptr && logits->dtype == STRATA_DTYPE_F32 ? STRATA_DTYPE_F32 : act_dtype;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "logits", logits, ldt, 2, 2, &a->logits));
  if (a->logits.cols < 1) return InvalidArgument(kOp, "logits has an empty vocabulary");
  if (a->logits.cols > INT32_MAX) return InvalidArgument(kOp, "logits has over 2^31 columns");
  if (params == nullptr) return InvalidArgument(kOp, "params is NULL");
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "tokens", tokens, STRATA_DTYPE_I32, 1, 1, &a->tokens));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "tokens", a->tokens, 0, a->logits.rows));
  if ((logprobs == nullptr) != (top_ids == nullptr)) {
    return InvalidArgument(kOp, "logprobs and top_ids must both be given or both be NULL");
  }
  a->has_logprobs = logprobs != nullptr;
  if (!a->has_logprobs) return Status();
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "logprobs", logprobs, STRATA_DTYPE_F32, 2, 2, &a->logprobs));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "logprobs", a->logprobs, 0, a->logits.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ExpectDim(kOp, "logprobs", a->logprobs, 1, 1 + STRATA_MAX_LOGPROBS));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "top_ids", top_ids, STRATA_DTYPE_I32, 2, 2, &a->top_ids));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "top_ids", a->top_ids, 0, a->logits.rows));
  return ExpectDim(kOp, "top_ids", a->top_ids, 1, STRATA_MAX_LOGPROBS);
}

Status CheckMaskLogits(strata_dtype act_dtype, const strata_tensor* logits,
                       const strata_tensor* rows, const strata_tensor* masks, MaskLogitsArgs* a) {
  constexpr const char* kOp = "mask_logits";
  const strata_dtype ldt =
      logits != nullptr && logits->dtype == STRATA_DTYPE_F32 ? STRATA_DTYPE_F32 : act_dtype;
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "logits", logits, ldt, 2, 2, &a->logits));
  if (a->logits.cols > INT32_MAX) return InvalidArgument(kOp, "logits has over 2^31 columns");
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "rows", rows, STRATA_DTYPE_I32, 1, 1, &a->rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "masks", masks, STRATA_DTYPE_I32, 2, 2, &a->masks));
  a->words = (a->logits.cols + 31) / 32;
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "masks", a->masks, 0, a->rows.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "masks", a->masks, 1, a->words));
  if (Overlaps(a->masks, a->logits) || Overlaps(a->rows, a->logits)) {
    return InvalidArgument(kOp, "rows and masks may not overlap logits");
  }
  return Status();
}

Status CheckSampleParams(const strata_sample_params& p, int64_t row) {
  constexpr const char* kOp = "sample";
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return InvalidArgument(kOp, "params[", row, "].temperature must be >= 0, got ", p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return InvalidArgument(kOp, "params[", row, "].top_p must be in (0, 1], got ", p.top_p);
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return InvalidArgument(kOp, "params[", row, "].min_p must be in [0, 1], got ", p.min_p);
  }
  if (!(p.uniform >= 0.0 && p.uniform < 1.0)) {
    return InvalidArgument(kOp, "params[", row, "].uniform must be in [0, 1), got ", p.uniform);
  }
  if (p.num_logprobs < -1 || p.num_logprobs > STRATA_MAX_LOGPROBS) {
    return InvalidArgument(kOp, "params[", row, "].num_logprobs must be in [-1, ",
                           STRATA_MAX_LOGPROBS, "], got ", p.num_logprobs);
  }
  return Status();
}

namespace {

Status ViewExpertTensors(const char* kOp, strata_dtype float_dtype, const strata_tensor* x,
                         const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                         const strata_tensor* w_gate_up, const strata_tensor* w_down,
                         strata_tensor* out, MoeExpertsArgs* a) {
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 2, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_weights", topk_weights, STRATA_DTYPE_F32, 2, 2, &a->weights));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "topk_ids", topk_ids, STRATA_DTYPE_I32, 2, 2, &a->ids));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "w_gate_up", w_gate_up, float_dtype, 3, 3, &a->gate_up));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "w_down", w_down, float_dtype, 3, 3, &a->down));
  return ViewTensor(kOp, "out", out, float_dtype, 2, 2, &a->out);
}

// moe_experts' checks, reported under `kOp`.
Status CheckExperts(const char* kOp, strata_dtype float_dtype, const strata_tensor* x,
                    const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                    const strata_tensor* w_gate_up, const strata_tensor* w_down, strata_tensor* out,
                    MoeExpertsArgs* a) {
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewExpertTensors(kOp, float_dtype, x, topk_weights, topk_ids, w_gate_up, w_down, out, a));
  a->experts = a->gate_up.shape[0];
  a->hidden = a->x.shape[1];
  a->inter = a->gate_up.shape[1] / 2;
  a->top_k = a->ids.shape[1];
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "out", a->out, "x", a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "topk_weights", a->weights, "topk_ids", a->ids));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "topk_ids", a->ids, 0, a->x.rows));
  if (a->gate_up.shape[1] % 2 != 0) {
    return InvalidArgument(kOp, "w_gate_up.shape[1] is ", a->gate_up.shape[1], ", not 2 * I");
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w_gate_up", a->gate_up, 2, a->hidden));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", a->down, 0, a->experts));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", a->down, 1, a->hidden));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w_down", a->down, 2, a->inter));
  if (Overlaps(a->out, a->x)) return InvalidArgument(kOp, "out overlaps x");
  if (a->hidden > INT_MAX || a->gate_up.shape[1] > INT_MAX || a->ids.numel() > INT_MAX) {
    return InvalidArgument(kOp, "a dimension exceeds INT_MAX");
  }
  return Status();
}

}  // namespace

Status CheckMoeExperts(strata_dtype float_dtype, const strata_tensor* x,
                       const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                       const strata_tensor* w_gate_up, const strata_tensor* w_down,
                       strata_tensor* out, MoeExpertsArgs* a) {
  return CheckExperts("moe_experts", float_dtype, x, topk_weights, topk_ids, w_gate_up, w_down, out,
                      a);
}

Status CheckMoeRouteExperts(strata_dtype float_dtype, const strata_tensor* x,
                            const strata_tensor* router_logits, int32_t top_k,
                            const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                            const strata_tensor* w_gate_up, const strata_tensor* w_down,
                            strata_tensor* out, MoeRouteArgs* route, MoeExpertsArgs* experts) {
  constexpr const char* kOp = "moe_route_experts";
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CheckRoute(kOp, float_dtype, router_logits, top_k, topk_weights, topk_ids, route));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CheckExperts(kOp, float_dtype, x, topk_weights, topk_ids, w_gate_up, w_down, out, experts));
  if (route->experts != experts->experts) {
    return InvalidArgument(kOp, "router_logits has ", route->experts, " columns for ",
                           experts->experts, " experts");
  }
  if (Overlaps(experts->out, route->logits) || Overlaps(experts->out, route->weights) ||
      Overlaps(experts->out, route->ids)) {
    return InvalidArgument(kOp, "out overlaps router_logits, topk_weights or topk_ids");
  }
  return Status();
}

Status CheckKvAppend(strata_dtype float_dtype, const strata_kv_cache* cache, int32_t layer,
                     const strata_tensor* k, const strata_tensor* v, const strata_tensor* slots,
                     KvAppendArgs* a) {
  constexpr const char* kOp = "kv_append";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewCache(kOp, cache, float_dtype, &a->cache));
  if (layer < 0 || layer >= a->cache.num_layers) {
    return InvalidArgument(kOp, "layer ", layer, " is out of range [0, ", a->cache.num_layers, ")");
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "k", k, float_dtype, 3, 3, &a->k));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "v", v, float_dtype, 3, 3, &a->v));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "slots", slots, STRATA_DTYPE_I32, 1, 1, &a->slots));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", a->k, 1, a->cache.num_kv_heads));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k", a->k, 2, a->cache.head_dim));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(kOp, "v", a->v, "k", a->k));
  return ExpectDim(kOp, "slots", a->slots, 0, a->k.rows);
}

Status CheckAttentionPrologue(strata_dtype float_dtype, const strata_tensor* q,
                              const strata_tensor* k, const strata_tensor* v,
                              const strata_tensor* q_norm, const strata_tensor* k_norm,
                              const strata_tensor* positions, const strata_tensor* inv_freq,
                              const strata_kv_cache* cache, int32_t layer,
                              const strata_tensor* slots, AttentionPrologueArgs* a) {
  constexpr const char* kOp = "attention_prologue";
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckKvAppend(float_dtype, cache, layer, k, v, slots, &a->kv));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "q", q, float_dtype, 3, 3, &a->q));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "q", a->q, 0, a->kv.k.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "q", a->q, 2, a->kv.cache.head_dim));
  const int64_t d = a->kv.cache.head_dim;
  if ((q_norm == nullptr) != (k_norm == nullptr)) {
    return InvalidArgument(kOp, "q_norm and k_norm must be both given or both NULL");
  }
  a->norms = q_norm != nullptr;
  if (a->norms) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "q_norm", q_norm, float_dtype, 1, 1, &a->q_norm));
    STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "k_norm", k_norm, float_dtype, 1, 1, &a->k_norm));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "q_norm", a->q_norm, 0, d));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "k_norm", a->k_norm, 0, d));
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "positions", positions, STRATA_DTYPE_I32, 1, 1, &a->positions));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "positions", a->positions, 0, a->q.rows));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      ViewTensor(kOp, "inv_freq", inv_freq, STRATA_DTYPE_F32, 1, 1, &a->inv_freq));
  if (2 * a->inv_freq.rows > d) {
    return InvalidArgument(kOp, "inv_freq has ", a->inv_freq.rows, " entries but head_dim ", d,
                           " allows at most ", d / 2);
  }
  if (a->q.numel() > 0 && a->q.data == a->kv.k.data) {
    return InvalidArgument(kOp, "q and k are the same tensor");
  }
  return Status();
}

Status CheckGemmSiluMul(strata_dtype float_dtype, const strata_tensor* x,
                        const strata_tensor* w_gate_up, const strata_tensor* bias,
                        const strata_tensor* scratch, const strata_tensor* out,
                        GemmSiluMulArgs* a) {
  constexpr const char* kOp = "gemm_silu_mul";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "x", x, float_dtype, 2, 2, &a->x));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "w_gate_up", w_gate_up, float_dtype, 2, 2, &a->w));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "scratch", scratch, float_dtype, 2, 2, &a->scratch));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "out", out, float_dtype, 2, 2, &a->out));
  const int64_t t = a->x.rows, h = a->x.cols;
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "w_gate_up", a->w, 1, h));
  if (a->w.rows % 2 != 0) {
    return InvalidArgument(kOp, "w_gate_up has ", a->w.rows, " rows, expected 2 * I");
  }
  a->inter = a->w.rows / 2;
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "scratch", a->scratch, 0, t));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "scratch", a->scratch, 1, 2 * a->inter));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 0, t));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "out", a->out, 1, a->inter));
  if (a->scratch.stride != a->scratch.cols || a->out.stride != a->out.cols) {
    return InvalidArgument(kOp, "scratch and out must be dense");
  }
  a->has_bias = bias != nullptr;
  if (a->has_bias) {
    STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(kOp, "bias", bias, float_dtype, 1, 1, &a->bias));
    STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(kOp, "bias", a->bias, 0, 2 * a->inter));
  }
  for (const TensorView* dst : {&a->scratch, &a->out}) {
    const char* name = dst == &a->out ? "out" : "scratch";
    if (Overlaps(*dst, a->x) || Overlaps(*dst, a->w) || (a->has_bias && Overlaps(*dst, a->bias))) {
      return InvalidArgument(kOp, name, " overlaps an input");
    }
  }
  if (Overlaps(a->out, a->scratch)) return InvalidArgument(kOp, "out overlaps scratch");
  return Status();
}

Status ViewBlockList(const char* op, const char* name, const strata_tensor* t, TensorView* view) {
  return ViewTensor(op, name, t, STRATA_DTYPE_I32, 1, 1, view);
}

}  // namespace strata::plugin_common
