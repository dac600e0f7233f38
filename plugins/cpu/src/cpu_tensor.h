#pragma once
// Argument validation for the CPU plugin's ops and the views they compute on. Every tensor an
// op touches goes through ViewTensor first: it rejects NULL descriptors, wrong dtypes or ranks,
// negative dims, row strides that would make rows overlap, and sizes that overflow.
#include <cstdint>

#include "cpu_status.h"
#include "strata/plugin/abi.h"

namespace strata::cpu {

// A validated tensor seen as a matrix: rows = shape[0], cols = product of the other dims,
// `stride` elements between consecutive rows (dense when the descriptor said 0).
struct TensorView {
  void* data = nullptr;
  int32_t ndim = 0;
  int64_t shape[STRATA_MAX_DIMS] = {};
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  float* Row(int64_t r) const { return static_cast<float*>(data) + r * stride; }
  const int32_t* Ints() const { return static_cast<const int32_t*>(data); }
  const int32_t* IntRow(int64_t r) const { return Ints() + r * stride; }
  int64_t numel() const { return rows * cols; }
  // Elements from the first to one past the last element the view covers.
  int64_t span() const { return rows == 0 ? 0 : (rows - 1) * stride + cols; }
};

const char* DtypeName(strata_dtype dtype);

// Validates `t` as a `dtype` tensor of rank in [min_ndim, max_ndim]. F16/BF16 where F32 is
// expected is UNSUPPORTED (this plugin computes in F32 only); anything else is INVALID_ARGUMENT.
Status ViewTensor(const char* op, const char* name, const strata_tensor* t, strata_dtype dtype,
                  int min_ndim, int max_ndim, TensorView* view);

// shape[dim] == expected, else INVALID_ARGUMENT naming the argument and the dimension.
Status ExpectDim(const char* op, const char* name, const TensorView& v, int dim, int64_t expected);
// Same rank and shape as `ref`.
Status ExpectShape(const char* op, const char* name, const TensorView& v, const char* ref_name,
                   const TensorView& ref);

// Every ids[i * stride] for i < n lies in [0, limit) (negative values pass if allow_negative).
Status CheckIndices(const char* op, const char* name, const int32_t* ids, int64_t n, int64_t stride,
                    int64_t limit, bool allow_negative = false);

// True when the element ranges of two float views intersect.
bool Overlaps(const TensorView& a, const TensorView& b);

// The paged KV pool, validated: see the layout in abi.h.
struct CacheView {
  float* data = nullptr;
  int64_t num_blocks = 0;
  int64_t num_layers = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t token_elems() const { return num_kv_heads * head_dim; }
  int64_t plane_elems() const { return block_size * token_elems(); }
  int64_t block_elems() const { return num_layers * 2 * plane_elems(); }
  // Start of K (kv = 0) or V (kv = 1) of `layer` in `block`.
  float* Plane(int64_t block, int64_t layer, int kv) const {
    return data + ((block * num_layers + layer) * 2 + kv) * plane_elems();
  }
};

Status ViewCache(const char* op, const strata_kv_cache* cache, CacheView* view);

}  // namespace strata::cpu
