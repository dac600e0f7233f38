#pragma once
// Host-side descriptor validation shared by the in-tree plugins. Every tensor an op touches goes
// through ViewTensor first: it rejects NULL descriptors, wrong dtypes or ranks, negative dims,
// row strides that would make rows overlap, and sizes that overflow. Only descriptors are read:
// nothing here dereferences a data pointer except CheckIndices, which a plugin whose device
// memory is host memory (the CPU plugin) may call on index arrays.
#include <cstdint>

#include "strata/plugin/abi.h"
#include "strata/plugin_common/status.h"

namespace strata::plugin_common {

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
  // Elements from the first to one past the last element the view covers.
  int64_t span() const { return rows == 0 ? 0 : (rows - 1) * stride + cols; }
  int64_t span_bytes() const { return span() * elem_bytes(); }
  // Row r as T (the caller knows the dtype it validated).
  template <typename T>
  T* Row(int64_t r) const {
    return static_cast<T*>(data) + r * stride;
  }
  const int32_t* Ints() const { return static_cast<const int32_t*>(data); }
  const int32_t* IntRow(int64_t r) const { return Ints() + r * stride; }
};

const char* DtypeName(strata_dtype dtype);

// Validates `t` as a `dtype` tensor of rank in [min_ndim, max_ndim]. A float dtype other than
// the expected float dtype is UNSUPPORTED (the plugin computes in another precision); any
// other mismatch (e.g. I32 for F32) is INVALID_ARGUMENT.
Status ViewTensor(const char* op, const char* name, const strata_tensor* t, strata_dtype dtype,
                  int min_ndim, int max_ndim, TensorView* view);

// shape[dim] == expected, else INVALID_ARGUMENT naming the argument and the dimension.
Status ExpectDim(const char* op, const char* name, const TensorView& v, int dim, int64_t expected);
// Same rank and shape as `ref`.
Status ExpectShape(const char* op, const char* name, const TensorView& v, const char* ref_name,
                   const TensorView& ref);

// Every ids[i * stride] for i < n lies in [0, limit) (negative values pass if allow_negative).
// Reads `ids`: host-addressable index arrays only.
Status CheckIndices(const char* op, const char* name, const int32_t* ids, int64_t n, int64_t stride,
                    int64_t limit, bool allow_negative = false);

// True when the byte ranges of two views intersect.
bool Overlaps(const TensorView& a, const TensorView& b);

// The paged KV pool, validated: see the layout in abi.h.
struct CacheView {
  void* data = nullptr;
  strata_dtype dtype = STRATA_DTYPE_F32;
  int64_t num_blocks = 0;
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t token_elems() const { return num_kv_heads * head_dim; }
  int64_t plane_elems() const { return block_size * token_elems(); }
  int64_t block_elems() const { return num_layers * 2 * plane_elems(); }
  // Start of K (kv = 0) or V (kv = 1) of `layer` in `block`, as T (the pool's dtype).
  template <typename T>
  T* Plane(int64_t block, int64_t layer, int kv) const {
    return static_cast<T*>(data) + ((block * num_layers + layer) * 2 + kv) * plane_elems();
  }
};

// Validates the pool descriptor; `dtype` is the KV dtype the plugin stores.
Status ViewCache(const char* op, const strata_kv_cache* cache, strata_dtype dtype, CacheView* view);

}  // namespace strata::plugin_common
