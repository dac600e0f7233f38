#pragma once
// Internals of the naive reference plugin (naive_plugin.h): element access by dtype, argument
// checks, and the op entry points shared between its source files.
#include <cstdint>
#include <initializer_list>
#include <string>

#include "strata/plugin/abi.h"

namespace strata::naive {

struct NaiveBackend {
  std::string last_error;
  strata_dtype dtype = STRATA_DTYPE_F32;  // weights, activations and KV cache
};

// Records `message` as the backend's last error and returns `code`.
strata_status Fail(strata_backend b, strata_status code, std::string message);
inline strata_status Invalid(strata_backend b, std::string message) {
  return Fail(b, STRATA_ERR_INVALID_ARGUMENT, std::move(message));
}

// Returns early from an op with INVALID_ARGUMENT when `expr` (a message) is not empty.
#define STRATA_NAIVE_CHECK(backend, expr)                               \
  do {                                                                  \
    std::string naive_check_message_ = (expr);                          \
    if (!naive_check_message_.empty()) {                                \
      return ::strata::naive::Invalid((backend), naive_check_message_); \
    }                                                                   \
  } while (0)

enum class Kind { kFloat, kF32, kI32 };

// "" if `t` is non-null, of `kind`, has exactly dims.size() dims equal to `dims` (-1 matches
// anything positive) and a row stride of 0 or at least the row size; else a message.
std::string ExpectTensor(const strata_tensor* t, const char* name,
                         std::initializer_list<int64_t> dims, Kind kind);
// "" if the cache descriptor is usable, else a message.
std::string ExpectCache(const strata_kv_cache* cache);

int64_t RowElems(const strata_tensor& t);  // elements of one index of dim 0
int64_t RowStride(const strata_tensor& t);
double LoadElem(const void* base, strata_dtype dtype, int64_t i);
void StoreElem(void* base, strata_dtype dtype, int64_t i, double v);

// Element `col` (flat index inside one index of dim 0) of row `row`.
inline double At(const strata_tensor& t, int64_t row, int64_t col) {
  return LoadElem(t.data, t.dtype, row * RowStride(t) + col);
}
inline void Set(const strata_tensor& t, int64_t row, int64_t col, double v) {
  StoreElem(t.data, t.dtype, row * RowStride(t) + col, v);
}
inline int32_t IntAt(const strata_tensor& t, int64_t row, int64_t col = 0) {
  return static_cast<const int32_t*>(t.data)[row * RowStride(t) + col];
}
inline void SetInt(const strata_tensor& t, int64_t row, int64_t col, int32_t v) {
  static_cast<int32_t*>(t.data)[row * RowStride(t) + col] = v;
}

// Element offset of (block, layer, kv, offset in block, head, dim) in the cache pool.
int64_t KvIndex(const strata_kv_cache& c, int64_t block, int64_t layer, int64_t kv, int64_t offset,
                int64_t head, int64_t dim);
size_t KvBlockBytes(const strata_kv_cache& c);

// KV cache, attention and MoE entries (naive_attention.cc, naive_moe.cc).
// kv_append's argument checks ("" when the call is valid).
std::string CheckKvAppendArgs(const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                              const strata_tensor* v, const strata_tensor* slots);
strata_status KvAppend(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                       int32_t layer, const strata_tensor* k, const strata_tensor* v,
                       const strata_tensor* slots);
strata_status AttentionPrefill(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                               const strata_attention_batch* batch,
                               const strata_attention_params* params, const strata_tensor* q,
                               strata_tensor* out);
strata_status AttentionDecode(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                              const strata_attention_batch* batch,
                              const strata_attention_params* params, const strata_tensor* q,
                              strata_tensor* out);
strata_status KvCopyBlocks(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                           const strata_tensor* src_blocks, const strata_tensor* dst_blocks);
strata_status KvGather(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                       const strata_tensor* blocks, void* dst);
strata_status KvScatter(strata_backend b, strata_stream s, const strata_kv_cache* cache,
                        const strata_tensor* blocks, const void* src);
strata_status MoeRoute(strata_backend b, strata_stream s, const strata_tensor* router_logits,
                       int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                       strata_tensor* topk_ids);
strata_status MoeExperts(strata_backend b, strata_stream s, const strata_tensor* x,
                         const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                         const strata_tensor* w_gate_up, const strata_tensor* w_down,
                         strata_tensor* out);
strata_status MoeRouteExperts(strata_backend b, strata_stream s, const strata_tensor* x,
                              const strata_tensor* router_logits, int32_t top_k,
                              int32_t renormalize, strata_tensor* topk_weights,
                              strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                              const strata_tensor* w_down, strata_tensor* out);
strata_status Sample(strata_backend b, strata_stream s, const strata_tensor* logits,
                     const strata_sample_params* params, strata_tensor* tokens,
                     strata_tensor* logprobs, strata_tensor* top_ids);
strata_status MaskLogits(strata_backend b, strata_stream s, strata_tensor* logits,
                         const strata_tensor* rows, const strata_tensor* masks);

}  // namespace strata::naive
