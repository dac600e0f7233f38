// KV cache ops: kv_append, kv_copy_blocks, kv_gather, kv_scatter. Block ids and slots are
// device arrays: the kernels skip out-of-range entries instead of the host checking them.
#include "cuda_kernels.h"
#include "cuda_ops.h"
#include "cuda_tensor.h"

namespace strata::cuda {
namespace {

CacheDims Dims(const CacheView& c) {
  return CacheDims{c.num_blocks, c.num_layers, c.block_size, c.num_kv_heads, c.head_dim};
}

int64_t BlockBytes(const CacheView& c) {
  return c.block_elems() * static_cast<int64_t>(sizeof(bf16));
}

Status Launched(const char* op, cudaError_t err) { return CudaStatus(op, err, "kernel launch"); }

}  // namespace

Status KvAppend(Stream& s, const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                const strata_tensor* v, const strata_tensor* slots) {
  constexpr const char* kOp = "kv_append";
  CacheView cv;
  TensorView kv, vv, sv;
  STRATA_CUDA_RETURN_IF_ERROR(ViewCache(kOp, cache, &cv));
  if (layer < 0 || layer >= cv.num_layers) {
    return InvalidArgument(kOp, "layer ", layer, " is out of range [0, ", cv.num_layers, ")");
  }
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "k", k, kStorageDtype, 3, 3, &kv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "v", v, kStorageDtype, 3, 3, &vv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewTensor(kOp, "slots", slots, STRATA_DTYPE_I32, 1, 1, &sv));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "k", kv, 1, cv.num_kv_heads));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "k", kv, 2, cv.head_dim));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectShape(kOp, "v", vv, "k", kv));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "slots", sv, 0, kv.rows));
  return Launched(kOp, LaunchKvAppend(static_cast<bf16*>(cv.data), Dims(cv), layer,
                                      static_cast<const bf16*>(kv.data), kv.stride,
                                      static_cast<const bf16*>(vv.data), vv.stride,
                                      static_cast<const int32_t*>(sv.data), kv.rows, s.stream));
}

namespace {

Status ViewBlockList(const char* op, const char* name, const strata_tensor* t, TensorView* view) {
  return ViewTensor(op, name, t, STRATA_DTYPE_I32, 1, 1, view);
}

}  // namespace

Status KvCopyBlocks(Stream& s, const strata_kv_cache* cache, const strata_tensor* src,
                    const strata_tensor* dst) {
  constexpr const char* kOp = "kv_copy_blocks";
  CacheView cv;
  TensorView sv, dv;
  STRATA_CUDA_RETURN_IF_ERROR(ViewCache(kOp, cache, &cv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewBlockList(kOp, "src_blocks", src, &sv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewBlockList(kOp, "dst_blocks", dst, &dv));
  STRATA_CUDA_RETURN_IF_ERROR(ExpectDim(kOp, "dst_blocks", dv, 0, sv.rows));
  // The host guarantees no block is in both lists and dst does not repeat: pairs run at once.
  return Launched(
      kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks,
                            static_cast<const int32_t*>(sv.data),
                            static_cast<const int32_t*>(dv.data), nullptr, sv.rows, s.stream));
}

Status KvGather(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks, void* dst) {
  constexpr const char* kOp = "kv_gather";
  CacheView cv;
  TensorView bv;
  STRATA_CUDA_RETURN_IF_ERROR(ViewCache(kOp, cache, &cv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewBlockList(kOp, "blocks", blocks, &bv));
  if (dst == nullptr && bv.rows > 0) return InvalidArgument(kOp, "dst is NULL");
  return Launched(kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks,
                                        static_cast<const int32_t*>(bv.data), nullptr,
                                        static_cast<char*>(dst), bv.rows, s.stream));
}

Status KvScatter(Stream& s, const strata_kv_cache* cache, const strata_tensor* blocks,
                 const void* src) {
  constexpr const char* kOp = "kv_scatter";
  CacheView cv;
  TensorView bv;
  STRATA_CUDA_RETURN_IF_ERROR(ViewCache(kOp, cache, &cv));
  STRATA_CUDA_RETURN_IF_ERROR(ViewBlockList(kOp, "blocks", blocks, &bv));
  if (src == nullptr && bv.rows > 0) return InvalidArgument(kOp, "src is NULL");
  return Launched(
      kOp, LaunchCopyBlocks(static_cast<char*>(cv.data), BlockBytes(cv), cv.num_blocks, nullptr,
                            static_cast<const int32_t*>(bv.data),
                            static_cast<char*>(const_cast<void*>(src)), bv.rows, s.stream));
}

}  // namespace strata::cuda
