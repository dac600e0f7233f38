// attention_prefill / attention_decode: validates the descriptors, then launches. Prefill takes
// the flash kernel (kernels_prefill_attention.cu) where it applies (head_dim 64 or 128, aligned
// buffers), decode the split-KV kernel (kernels_decode_attention.cu) where it applies (head_dim
// 64 or 128, GQA group <= 8); anything else takes the general kernel (kernels_attention.cu).
// The batch arrays (q_start, kv_len, block_tables) are device arrays, so their values are
// guarded inside the kernel: a row no sequence owns, a sequence whose kv_len does not cover
// its rows or fit its table, and a table entry outside the pool are skipped.
#include <optional>
#include <utility>

#include "cuda_common.h"
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin_common/op_args.h"

namespace strata::cuda {

Status Attention(Stream& s, bool decode, const strata_kv_cache* cache,
                 const strata_attention_batch* batch, const strata_attention_params* params,
                 const strata_tensor* q, strata_tensor* out) {
  const char* op = decode ? "attention_decode" : "attention_prefill";
  plugin_common::AttentionViews v;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckAttention(op, kStorageDtype, cache, params, q, out, &v));
  const CacheView& cv = v.cache;
  const TensorView &qv = v.q, &ov = v.out;
  const int64_t heads = v.q_heads;
  if (cv.head_dim > kMaxAttentionHeadDim) {
    return Unsupported(op, "head_dim ", cv.head_dim, " exceeds ", kMaxAttentionHeadDim);
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckAttentionBatch(op, batch));
  if (batch->num_seqs == 0) return Status();
  AttentionArgs a;
  a.q = static_cast<const bf16*>(qv.data);
  a.q_stride = qv.stride;
  a.out = static_cast<bf16*>(ov.data);
  a.out_stride = ov.stride;
  a.rows = qv.rows;
  a.q_heads = heads;
  a.cache = static_cast<const bf16*>(cv.data);
  a.dims = CacheDims{cv.num_blocks, cv.num_layers, cv.block_size, cv.num_kv_heads, cv.head_dim};
  a.layer = params->layer;
  a.q_start = batch->q_start;
  a.kv_len = batch->kv_len;
  a.block_tables = batch->block_tables;
  a.num_seqs = batch->num_seqs;
  a.max_blocks_per_seq = batch->max_blocks_per_seq;
  a.scale = params->scale;
  a.sliding_window = params->sliding_window;
  // The batch arrays early where neither op before may have written them (an engine uploads
  // them with copies at the start of a step, several ops before any attention).
  const auto array = [](const int32_t* p, int64_t n) {
    return ByteRange{p, static_cast<size_t>(n) * sizeof(int32_t)};
  };
  a.early_batch = !s.writes.WrittenJustBefore(array(a.q_start, int64_t{a.num_seqs} + 1)) &&
                  !s.writes.WrittenJustBefore(array(a.kv_len, a.num_seqs)) &&
                  !s.writes.WrittenJustBefore(
                      array(a.block_tables, int64_t{a.num_seqs} * a.max_blocks_per_seq));
  s.writes.Wrote({ByteRange::Of(ov)});
  // A prologue held back for this op (attention_prologue just before) stays held until the
  // split-KV launch takes it; any other kernel launches it first, and a return before any
  // launch leaves it to the entry.
  if (!decode) {
    return CudaStatus(op,
                      PrefillAttentionSupported(a) ? LaunchPrefillAttention(a, s.stream)
                                                   : LaunchAttention(a, s.stream),
                      "kernel launch");
  }
  if (!DecodeAttentionSupported(a)) {
    STRATA_PLUGIN_RETURN_IF_ERROR(s.FlushPrologue(op));
    return CudaStatus(op, LaunchAttention(a, s.stream), "kernel launch");
  }
  DecodePlan plan;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CudaStatus(op, PlanDecodeAttention(a, batch->max_kv_len, &plan), "decode plan"));
  void* workspace = nullptr;
  if (plan.workspace_bytes > 0) {
    STRATA_PLUGIN_RETURN_IF_ERROR(s.Workspace(op, plan.workspace_bytes, &workspace));
  }
  const std::optional<PrologueArgs> taken = std::exchange(s.deferred_prologue, std::nullopt);
  return CudaStatus(op,
                    LaunchDecodeAttention(a, plan, workspace, s.stream, taken ? &*taken : nullptr),
                    "kernel launch");
}

}  // namespace strata::cuda
