// The argument checks of attention and the KV block ops (op_args.h).
#include "strata/plugin_common/op_args.h"

namespace strata::plugin_common {
namespace {

// A block list, and with kHost every id in the pool.
Status ViewBlocks(const char* op, const char* name, IndexValues values, const strata_tensor* t,
                  const CacheView& cache, TensorView* view) {
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewBlockList(op, name, t, view));
  if (values == IndexValues::kDevice) return Status();
  return CheckIndices(op, name, view->Ints(), view->rows, 1, cache.num_blocks);
}

// kv_gather / kv_scatter: the pool, the block list, and the packed buffer `buffer_name`.
Status CheckKvPacked(const char* op, strata_dtype kv_dtype, IndexValues values,
                     const strata_kv_cache* cache, const strata_tensor* blocks, const void* buffer,
                     const char* buffer_name, KvBlocksArgs* a) {
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewCache(op, cache, kv_dtype, &a->cache));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewBlocks(op, "blocks", values, blocks, a->cache, &a->src));
  if (buffer == nullptr && a->src.rows > 0) return InvalidArgument(op, buffer_name, " is NULL");
  return Status();
}

}  // namespace

Status CheckAttention(const char* op, strata_dtype float_dtype, const strata_kv_cache* cache,
                      const strata_attention_params* params, const strata_tensor* q,
                      const strata_tensor* out, AttentionViews* a) {
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewCache(op, cache, float_dtype, &a->cache));
  if (params == nullptr) return InvalidArgument(op, "params is NULL");
  if (params->layer < 0 || params->layer >= a->cache.num_layers) {
    return InvalidArgument(op, "params.layer ", params->layer, " is out of range [0, ",
                           a->cache.num_layers, ")");
  }
  if (params->sliding_window < 0) {
    return InvalidArgument(op, "params.sliding_window must be >= 0, got ", params->sliding_window);
  }
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(op, "q", q, float_dtype, 3, 3, &a->q));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewTensor(op, "out", out, float_dtype, 3, 3, &a->out));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectShape(op, "out", a->out, "q", a->q));
  STRATA_PLUGIN_RETURN_IF_ERROR(ExpectDim(op, "q", a->q, 2, a->cache.head_dim));
  a->q_heads = a->q.shape[1];
  if (a->q_heads == 0 || a->q_heads % a->cache.num_kv_heads != 0) {
    return InvalidArgument(op, "q has ", a->q_heads,
                           " heads, not a positive multiple of the cache's ", a->cache.num_kv_heads,
                           " kv heads");
  }
  return Status();
}

Status CheckAttentionBatch(const char* op, const strata_attention_batch* batch) {
  if (batch == nullptr) return InvalidArgument(op, "batch is NULL");
  if (batch->num_seqs < 0 || batch->max_blocks_per_seq < 0) {
    return InvalidArgument(op, "batch.num_seqs and batch.max_blocks_per_seq must be >= 0");
  }
  if (batch->num_seqs == 0) return Status();
  if (batch->q_start == nullptr || batch->kv_len == nullptr ||
      (batch->block_tables == nullptr && batch->max_blocks_per_seq > 0)) {
    return InvalidArgument(op,
                           "batch.q_start, batch.kv_len and batch.block_tables must not be NULL");
  }
  return Status();
}

Status CheckKvCopyBlocks(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                         const strata_tensor* src, const strata_tensor* dst, KvBlocksArgs* a) {
  constexpr const char* kOp = "kv_copy_blocks";
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewCache(kOp, cache, kv_dtype, &a->cache));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewBlocks(kOp, "src_blocks", values, src, a->cache, &a->src));
  STRATA_PLUGIN_RETURN_IF_ERROR(ViewBlocks(kOp, "dst_blocks", values, dst, a->cache, &a->dst));
  return ExpectDim(kOp, "dst_blocks", a->dst, 0, a->src.rows);
}

Status CheckKvGather(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                     const strata_tensor* blocks, const void* dst, KvBlocksArgs* a) {
  return CheckKvPacked("kv_gather", kv_dtype, values, cache, blocks, dst, "dst", a);
}

Status CheckKvScatter(strata_dtype kv_dtype, IndexValues values, const strata_kv_cache* cache,
                      const strata_tensor* blocks, const void* src, KvBlocksArgs* a) {
  return CheckKvPacked("kv_scatter", kv_dtype, values, cache, blocks, src, "src", a);
}

}  // namespace strata::plugin_common
