#pragma once
// Argument validation for the CUDA plugin's ops. Descriptors (shapes, strides, dtypes) live on
// the host and are checked here before anything is enqueued; the index arrays they point to
// live on the device, so their *values* are bounds-guarded inside the kernels instead (an
// out-of-range id or slot is skipped, never dereferenced).
#include <cstdint>

#include "cuda_status.h"
#include "strata/plugin/abi.h"

namespace strata::cuda {

// A validated tensor seen as a matrix: rows = shape[0], cols = product of the other dims,
// `stride` elements between consecutive rows (dense when the descriptor said 0).
struct TensorView {
  void* data = nullptr;
  strata_dtype dtype = STRATA_DTYPE_F32;
  int32_t ndim = 0;
  int64_t shape[STRATA_MAX_DIMS] = {};
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  int64_t numel() const { return rows * cols; }
  int64_t elem_bytes() const {
    return dtype == STRATA_DTYPE_BF16 || dtype == STRATA_DTYPE_F16 ? 2 : 4;
  }
  // Bytes from the first to one past the last element the view covers.
  int64_t span_bytes() const { return rows == 0 ? 0 : ((rows - 1) * stride + cols) * elem_bytes(); }
};

const char* DtypeName(strata_dtype dtype);

// Validates `t` as a `dtype` tensor of rank in [min_ndim, max_ndim]. A float dtype other than
// the expected one is UNSUPPORTED (this plugin stores activations and weights in BF16); any
// other mismatch is INVALID_ARGUMENT.
Status ViewTensor(const char* op, const char* name, const strata_tensor* t, strata_dtype dtype,
                  int min_ndim, int max_ndim, TensorView* view);

// shape[dim] == expected, else INVALID_ARGUMENT naming the argument and the dimension.
Status ExpectDim(const char* op, const char* name, const TensorView& v, int dim, int64_t expected);
// Same rank and shape as `ref`.
Status ExpectShape(const char* op, const char* name, const TensorView& v, const char* ref_name,
                   const TensorView& ref);

// True when the byte ranges of two views intersect.
bool Overlaps(const TensorView& a, const TensorView& b);

// The paged KV pool, validated: see the layout in abi.h.
struct CacheView {
  void* data = nullptr;
  int64_t num_blocks = 0;
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t token_elems() const { return num_kv_heads * head_dim; }
  int64_t plane_elems() const { return block_size * token_elems(); }
  int64_t block_elems() const { return num_layers * 2 * plane_elems(); }
};

// The storage dtype of activations, weights and the KV pool.
inline constexpr strata_dtype kStorageDtype = STRATA_DTYPE_BF16;

Status ViewCache(const char* op, const strata_kv_cache* cache, CacheView* view);

}  // namespace strata::cuda
