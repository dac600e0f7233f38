// KV cache ops: kv_append, kv_copy_blocks, kv_gather, kv_scatter, and attention_prologue (q/k
// norms + rope + kv_append). Block ids and slots are device arrays: the kernels skip
// out-of-range entries instead of the host checking them.
#include "cuda_common.h"
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

CacheDims Dims(const CacheView& c) {
  return CacheDims{c.num_blocks, c.num_layers, c.block_size, c.num_kv_heads, c.head_dim};
}

int64_t BlockBytes(const CacheView& c) {
  return c.block_elems() * static_cast<int64_t>(sizeof(bf16));
}

Status Launched(const char* op, cudaError_t err) { return CudaStatus(op, err, "kernel launch"); }

// Block ids and slots are device memory: the kernels skip out-of-range entries.
constexpr plugin_common::IndexValues kDeviceIds = plugin_common::IndexValues::kDevice;

// The whole pool, for WriteHistory::Wrote.
ByteRange Pool(const CacheView& c) {
  return {c.data, static_cast<size_t>(BlockBytes(c) * c.num_blocks)};
}

}  // namespace

Status KvAppend(Stream& s, const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                const strata_tensor* v, const strata_tensor* slots) {
  constexpr const char* kOp = "kv_append";
  plugin_common::KvAppendArgs args;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvAppend(kStorageDtype, cache, layer, k, v, slots, &args));
  const CacheView& cv = args.cache;
  const TensorView &kv = args.k, &vv = args.v, &sv = args.slots;
  s.writes.Wrote({Pool(cv)});
  return Launched(kOp, LaunchKvAppend(static_cast<bf16*>(cv.data), Dims(cv), layer,
                                      static_cast<const bf16*>(kv.data), kv.stride,
                                      static_cast<const bf16*>(vv.data), vv.stride,
                                      static_cast<const int32_t*>(sv.data), kv.rows, s.stream));
}

Status AttentionPrologue(Stream& s, strata_tensor* q, strata_tensor* k, const strata_tensor* v,
                         const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
                         const strata_tensor* positions, const strata_tensor* inv_freq,
                         float mscale, const strata_kv_cache* cache, int32_t layer,
                         const strata_tensor* slots) {
  constexpr const char* kOp = "attention_prologue";
  plugin_common::AttentionPrologueArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckAttentionPrologue(
      kStorageDtype, q, k, v, q_norm, k_norm, positions, inv_freq, cache, layer, slots, &a));
  if (a.norms && !(eps >= 0.0f)) return InvalidArgument(kOp, "eps must be >= 0, got ", eps);
  const int64_t d = a.kv.cache.head_dim, r = a.inv_freq.rows;
  if (a.q.rows == 0 || d == 0) return Status();
  s.writes.Wrote({ByteRange::Of(a.q), ByteRange::Of(a.kv.k), Pool(a.kv.cache)});
  if (!AttentionPrologueFused(d, r)) {  // other shapes: the separate kernels, same results
    if (a.norms) {
      STRATA_PLUGIN_RETURN_IF_ERROR(RmsNorm(s, q, nullptr, q_norm, eps, q));
      STRATA_PLUGIN_RETURN_IF_ERROR(RmsNorm(s, k, nullptr, k_norm, eps, k));
    }
    STRATA_PLUGIN_RETURN_IF_ERROR(Rope(s, q, k, positions, inv_freq, mscale));
    return KvAppend(s, cache, layer, k, v, slots);
  }
  PrologueArgs p;
  p.q = static_cast<bf16*>(a.q.data);
  p.q_stride = a.q.stride;
  p.hq = static_cast<int>(a.q.shape[1]);
  p.k = static_cast<bf16*>(a.kv.k.data);
  p.k_stride = a.kv.k.stride;
  p.hk = static_cast<int>(a.kv.k.shape[1]);
  p.v = static_cast<const bf16*>(a.kv.v.data);
  p.v_stride = a.kv.v.stride;
  p.q_norm = a.norms ? static_cast<const bf16*>(a.q_norm.data) : nullptr;
  p.k_norm = a.norms ? static_cast<const bf16*>(a.k_norm.data) : nullptr;
  p.eps = eps;
  p.positions = static_cast<const int32_t*>(a.positions.data);
  p.inv_freq = static_cast<const float*>(a.inv_freq.data);
  p.r = static_cast<int>(r);
  p.mscale = mscale;
  p.cache = static_cast<bf16*>(a.kv.cache.data);
  p.dims = Dims(a.kv.cache);
  p.layer = layer;
  p.slots = static_cast<const int32_t*>(a.kv.slots.data);
  p.rows = a.q.rows;
  if (d == 128 && p.rows <= PrologueInAttentionMaxRows()) {  // decode attention may run it
    s.deferred_prologue = p;
    return Status();
  }
  return Launched(kOp, LaunchAttentionPrologue(p, s.stream));
}

Status KvCopyBlocks(Stream& s, const strata_kv_cache* cache, const strata_tensor* src,
                    const strata_tensor* dst) {
  constexpr const char* kOp = "kv_copy_blocks";
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvCopyBlocks(kStorageDtype, kDeviceIds, cache, src, dst, &a));
  const CacheView& cv = a.cache;
  const TensorView &sv = a.src, &dv = a.dst;
  // The host guarantees no block is in both lists and dst does not repeat: pairs run at once.
  return Launched(
      kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks,
                            static_cast<const int32_t*>(sv.data),
                            static_cast<const int32_t*>(dv.data), nullptr, sv.rows, s.stream));
}

Status KvGather(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks, void* dst) {
  constexpr const char* kOp = "kv_gather";
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvGather(kStorageDtype, kDeviceIds, cache, blocks, dst, &a));
  const CacheView& cv = a.cache;
  const TensorView& bv = a.src;
  return Launched(kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks,
                                        static_cast<const int32_t*>(bv.data), nullptr,
                                        static_cast<char*>(dst), bv.rows, s.stream));
}

Status KvScatter(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks,
                 const void* src) {
  constexpr const char* kOp = "kv_scatter";
  plugin_common::KvBlocksArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckKvScatter(kStorageDtype, kDeviceIds, cache, blocks, src, &a));
  const CacheView& cv = a.cache;
  const TensorView& bv = a.src;
  return Launched(
      kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks, nullptr,
                            static_cast<const int32_t*>(bv.data),
                            static_cast<char*>(const_cast<void*>(src)), bv.rows, s.stream));
}

}  // namespace strata::cuda
