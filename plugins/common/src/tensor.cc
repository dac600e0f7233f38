#include "strata/plugin_common/tensor.h"

#include <string>

namespace strata::plugin_common {
namespace {

// Largest element count or stride accepted; keeps every product below int64 overflow.
constexpr int64_t kMaxElems = int64_t{1} << 48;

bool MulLimited(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= kMaxElems;
}

bool IsFloat(strata_dtype d) {
  return d == STRATA_DTYPE_F32 || d == STRATA_DTYPE_F16 || d == STRATA_DTYPE_BF16;
}

Status CheckDtype(const char* op, const char* name, strata_dtype got, strata_dtype want) {
  if (got == want) return Status();
  if (IsFloat(want) && IsFloat(got)) {
    return Unsupported(op, name, ": dtype ", DtypeName(got), " is not supported; expected ",
                       DtypeName(want));
  }
  return InvalidArgument(op, name, ": dtype ", DtypeName(got), ", expected ", DtypeName(want));
}

Status CheckShape(const char* op, const char* name, const strata_tensor& t, int min_ndim,
                  int max_ndim) {
  if (t.ndim < min_ndim || t.ndim > max_ndim) {
    if (min_ndim == max_ndim)
      return InvalidArgument(op, name, ": ndim ", t.ndim, ", expected ", min_ndim);
    return InvalidArgument(op, name, ": ndim ", t.ndim, ", expected ", min_ndim, "..", max_ndim);
  }
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || t.shape[d] > kMaxElems) {
      return InvalidArgument(op, name, ": shape[", d, "] = ", t.shape[d], " is out of range");
    }
  }
  return Status();
}

// Fills rows/cols/stride of `v` from `t` (dtype and shape already checked).
Status ComputeLayout(const char* op, const char* name, const strata_tensor& t, TensorView* v) {
  v->rows = t.shape[0];
  v->cols = 1;
  for (int d = 0; d < t.ndim; ++d) v->shape[d] = t.shape[d];
  for (int d = 1; d < t.ndim; ++d) {
    if (!MulLimited(v->cols, t.shape[d], &v->cols)) {
      return InvalidArgument(op, name, ": too many elements");
    }
  }
  if (t.row_stride < 0) return InvalidArgument(op, name, ": negative row_stride");
  if (t.ndim == 1 && t.row_stride > 1) {
    return InvalidArgument(op, name, ": a 1-D tensor must be dense (row_stride ", t.row_stride,
                           ")");
  }
  v->stride = t.row_stride == 0 ? v->cols : t.row_stride;
  if (v->stride < v->cols) {
    return InvalidArgument(op, name, ": row_stride ", t.row_stride, " is smaller than a row (",
                           v->cols, " elements)");
  }
  int64_t extent = 0;
  if (!MulLimited(v->rows, v->stride, &extent)) {
    return InvalidArgument(op, name, ": too many elements");
  }
  return Status();
}

}  // namespace

const char* DtypeName(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32:
      return "F32";
    case STRATA_DTYPE_F16:
      return "F16";
    case STRATA_DTYPE_BF16:
      return "BF16";
    case STRATA_DTYPE_I32:
      return "I32";
  }
  return "<invalid dtype>";
}

Status ViewTensor(const char* op, const char* name, const strata_tensor* t, strata_dtype dtype,
                  int min_ndim, int max_ndim, TensorView* view) {
  if (t == nullptr) return InvalidArgument(op, name, " is NULL");
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckDtype(op, name, t->dtype, dtype));
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckShape(op, name, *t, min_ndim, max_ndim));
  TensorView v;
  v.data = t->data;
  v.dtype = t->dtype;
  v.ndim = t->ndim;
  STRATA_PLUGIN_RETURN_IF_ERROR(ComputeLayout(op, name, *t, &v));
  if (v.data == nullptr && v.numel() > 0) return InvalidArgument(op, name, ": data is NULL");
  *view = v;
  return Status();
}

Status ExpectDim(const char* op, const char* name, const TensorView& v, int dim, int64_t expected) {
  if (v.shape[dim] == expected) return Status();
  return InvalidArgument(op, name, ".shape[", dim, "] is ", v.shape[dim], ", expected ", expected);
}

Status ExpectShape(const char* op, const char* name, const TensorView& v, const char* ref_name,
                   const TensorView& ref) {
  bool same = v.ndim == ref.ndim;
  for (int d = 0; same && d < v.ndim; ++d) same = v.shape[d] == ref.shape[d];
  if (same) return Status();
  auto shape = [](const TensorView& t) {
    std::string s = "[";
    for (int d = 0; d < t.ndim; ++d) s += Cat(d ? ", " : "", t.shape[d]);
    return s + "]";
  };
  return InvalidArgument(op, name, " has shape ", shape(v), " but ", ref_name, " has shape ",
                         shape(ref));
}

Status CheckIndices(const char* op, const char* name, const int32_t* ids, int64_t n, int64_t stride,
                    int64_t limit, bool allow_negative) {
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i * stride];
    if (id >= limit || (id < 0 && !allow_negative)) {
      return InvalidArgument(op, name, "[", i, "] = ", id, " is out of range [0, ", limit, ")");
    }
  }
  return Status();
}

bool Overlaps(const TensorView& a, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data);
  const char* b0 = static_cast<const char*>(b.data);
  return a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

Status ViewCache(const char* op, const strata_kv_cache* cache, strata_dtype dtype,
                 CacheView* view) {
  if (cache == nullptr) return InvalidArgument(op, "cache is NULL");
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckDtype(op, "cache", cache->dtype, dtype));
  if (cache->num_blocks < 0 || cache->num_layers <= 0 || cache->block_size <= 0 ||
      cache->num_kv_heads <= 0 || cache->head_dim <= 0) {
    return InvalidArgument(op, "cache: num_blocks must be >= 0 and num_layers, block_size, ",
                           "num_kv_heads, head_dim > 0 (got ", cache->num_blocks, ", ",
                           cache->num_layers, ", ", cache->block_size, ", ", cache->num_kv_heads,
                           ", ", cache->head_dim, ")");
  }
  CacheView v;
  v.data = cache->data;
  v.dtype = cache->dtype;
  v.num_blocks = cache->num_blocks;
  v.num_layers = cache->num_layers;
  v.block_size = cache->block_size;
  v.num_kv_heads = cache->num_kv_heads;
  v.head_dim = cache->head_dim;
  int64_t total = 0;
  if (!MulLimited(v.token_elems(), v.block_size, &total) ||
      !MulLimited(total, 2 * v.num_layers, &total) || !MulLimited(total, v.num_blocks, &total)) {
    return InvalidArgument(op, "cache: pool size overflows");
  }
  if (v.data == nullptr && total > 0) return InvalidArgument(op, "cache: data is NULL");
  *view = v;
  return Status();
}

}  // namespace strata::plugin_common
