/*
 * A minimal, complete strata engine plugin in plain C99: fp32 everywhere, one thread, ops run
 * synchronously when called, "device" memory is host memory. It implements every required
 * entry of strata_plugin_api_v1 and leaves the optional MoE entries NULL.
 *
 * Read it next to strata/plugin/abi.h and docs/plugins.md; check it with
 *     strata plugin-test --plugin ./libminimal_plugin.so
 */
#define _DEFAULT_SOURCE /* sysconf(_SC_PHYS_PAGES) */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata/plugin/abi.h"

#define F32 STRATA_DTYPE_F32
#define I32 STRATA_DTYPE_I32
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* ---- backend, errors ------------------------------------------------------------------ */

typedef struct minimal_backend {
  char error[256]; /* last_error(): valid until the next call on this backend */
} minimal_backend;

typedef struct minimal_stream {
  int unused; /* ops run synchronously; a stream is only a token */
} minimal_stream;

static strata_status fail(strata_backend b, strata_status code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(((minimal_backend*)b)->error, sizeof(((minimal_backend*)b)->error), fmt, args);
  va_end(args);
  return code;
}

/* ---- tensors ---------------------------------------------------------------------------- */

static int64_t row_elems(const strata_tensor* t) {
  int64_t n = 1;
  for (int i = 1; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

/* Elements between consecutive indices of dim 0: row_stride, or dense when it is 0. */
static int64_t row_stride(const strata_tensor* t) {
  return t->row_stride != 0 ? t->row_stride : row_elems(t);
}

static float* frow(const strata_tensor* t, int64_t row) {
  return (float*)t->data + row * row_stride(t);
}

static const int32_t* irow(const strata_tensor* t, int64_t row) {
  return (const int32_t*)t->data + row * row_stride(t);
}

/* 1 if `t` is non-NULL, of `dtype`, with `ndim` dims equal to `dims` (-1 matches any
 * positive size) and a valid row stride. */
static int tensor_ok(const strata_tensor* t, strata_dtype dtype, int ndim, const int64_t* dims) {
  if (t == NULL || t->data == NULL || t->dtype != dtype || t->ndim != ndim) return 0;
  for (int i = 0; i < ndim; ++i) {
    if (t->shape[i] <= 0 || (dims[i] >= 0 && t->shape[i] != dims[i])) return 0;
  }
  return t->row_stride == 0 || t->row_stride >= row_elems(t);
}

/* ---- lifecycle, memory, streams ----------------------------------------------------------- */

static strata_status minimal_create(const char* config_json, strata_backend* out) {
  (void)config_json; /* no options */
  minimal_backend* b = calloc(1, sizeof(minimal_backend));
  if (b == NULL) return STRATA_ERR_OUT_OF_MEMORY;
  *out = (strata_backend)b;
  return STRATA_OK;
}

static void minimal_destroy(strata_backend b) { free(b); }

static const char* minimal_last_error(strata_backend b) { return ((minimal_backend*)b)->error; }

static strata_status minimal_get_info(strata_backend b, strata_backend_info* out) {
  (void)b;
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  out->name = "minimal";
  out->device_name = "host CPU, one thread";
  out->weight_dtype = F32;
  out->act_dtype = F32;
  out->kv_dtype = F32;
  out->total_memory = page * (uint64_t)sysconf(_SC_PHYS_PAGES);
  out->free_memory = page * (uint64_t)sysconf(_SC_AVPHYS_PAGES);
  return STRATA_OK;
}

static strata_status minimal_alloc(strata_backend b, size_t bytes, void** out) {
  *out = malloc(bytes == 0 ? 1 : bytes);
  if (*out == NULL) return fail(b, STRATA_ERR_OUT_OF_MEMORY, "alloc: %zu bytes", bytes);
  return STRATA_OK;
}

static void minimal_free(strata_backend b, void* ptr) {
  (void)b;
  free(ptr);
}

static strata_status minimal_stream_create(strata_backend b, strata_stream* out) {
  minimal_stream* s = calloc(1, sizeof(minimal_stream));
  if (s == NULL) return fail(b, STRATA_ERR_OUT_OF_MEMORY, "stream_create");
  *out = (strata_stream)s;
  return STRATA_OK;
}

static void minimal_stream_destroy(strata_backend b, strata_stream s) {
  (void)b;
  free(s);
}

static strata_status minimal_stream_synchronize(strata_backend b, strata_stream s) {
  (void)b;
  (void)s;
  return STRATA_OK; /* every op has already finished when it returns */
}

static strata_status minimal_copy(strata_backend b, strata_stream s, void* dst, const void* src,
                                  size_t bytes) {
  (void)b;
  (void)s;
  if (bytes != 0) memmove(dst, src, bytes);
  return STRATA_OK;
}

/* ---- dense ops ------------------------------------------------------------------------------ */

static strata_status minimal_embedding(strata_backend b, strata_stream s,
                                       const strata_tensor* table, const strata_tensor* ids,
                                       strata_tensor* out) {
  (void)s;
  if (!tensor_ok(table, F32, 2, DIMS(-1, -1)) || !tensor_ok(ids, I32, 1, DIMS(-1))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "embedding: table f32 [V, H], ids i32 [T]");
  }
  const int64_t vocab = table->shape[0], hidden = table->shape[1], tokens = ids->shape[0];
  if (!tensor_ok(out, F32, 2, DIMS(tokens, hidden))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "embedding: out must be f32 [T, H]");
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = *irow(ids, t);
    if (id < 0 || id >= vocab) return fail(b, STRATA_ERR_INVALID_ARGUMENT, "embedding: id %d", id);
  }
  for (int64_t t = 0; t < tokens; ++t) {
    memcpy(frow(out, t), frow(table, *irow(ids, t)), (size_t)hidden * sizeof(float));
  }
  return STRATA_OK;
}

static int same_shape(const strata_tensor* a, const strata_tensor* b) {
  return tensor_ok(a, F32, b->ndim, b->shape);
}

static strata_status minimal_rms_norm(strata_backend b, strata_stream s, const strata_tensor* x,
                                      strata_tensor* residual, const strata_tensor* weight,
                                      float eps, strata_tensor* out) {
  (void)s;
  if (x == NULL || (x->ndim != 2 && x->ndim != 3) || !tensor_ok(x, F32, x->ndim, x->shape) ||
      !same_shape(out, x) || (residual != NULL && !same_shape(residual, x))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT,
                "rms_norm: x, out, residual f32 [T, H] or [T, h, D]");
  }
  const int64_t dim = x->shape[x->ndim - 1], vectors = row_elems(x) / dim;
  if (!tensor_ok(weight, F32, 1, DIMS(dim))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "rms_norm: weight must be f32 [%lld]",
                (long long)dim);
  }
  const float* w = (const float*)weight->data;
  for (int64_t t = 0; t < x->shape[0]; ++t) {
    for (int64_t j = 0; j < vectors; ++j) {
      float* v = frow(x, t) + j * dim;
      if (residual != NULL) {
        float* r = frow(residual, t) + j * dim;
        for (int64_t i = 0; i < dim; ++i) r[i] += v[i];
        v = r;
      }
      float sum_sq = 0.0f;
      for (int64_t i = 0; i < dim; ++i) sum_sq += v[i] * v[i];
      const float inv_rms = 1.0f / sqrtf(sum_sq / (float)dim + eps);
      float* o = frow(out, t) + j * dim; /* may alias x: each element is read before written */
      for (int64_t i = 0; i < dim; ++i) o[i] = v[i] * inv_rms * w[i];
    }
  }
  return STRATA_OK;
}

static strata_status minimal_gemm(strata_backend b, strata_stream s, const strata_tensor* x,
                                  const strata_tensor* w, const strata_tensor* bias,
                                  int32_t accumulate, strata_tensor* out) {
  (void)s;
  if (!tensor_ok(x, F32, 2, DIMS(-1, -1))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "gemm: x must be f32 [M, K]");
  }
  const int64_t m = x->shape[0], k = x->shape[1];
  if (!tensor_ok(w, F32, 2, DIMS(-1, k))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "gemm: w must be f32 [N, %lld]", (long long)k);
  }
  const int64_t n = w->shape[0];
  if (!tensor_ok(out, F32, 2, DIMS(m, n)) || (bias != NULL && !tensor_ok(bias, F32, 1, DIMS(n)))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "gemm: out f32 [M, N], bias f32 [N] or NULL");
  }
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = frow(x, i);
    float* oi = frow(out, i);
    for (int64_t j = 0; j < n; ++j) {
      const float* wj = frow(w, j);
      float acc = bias != NULL ? ((const float*)bias->data)[j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) acc += xi[p] * wj[p];
      oi[j] = accumulate ? oi[j] + acc : acc;
    }
  }
  return STRATA_OK;
}

/* Rotate-half pairing over the first 2R dims of each head; the angle is the fp32 product. */
static void rotate(strata_tensor* x, const int32_t* pos, const float* inv_freq, int64_t r,
                   float mscale) {
  const int64_t heads = x->shape[1], dim = x->shape[2];
  for (int64_t t = 0; t < x->shape[0]; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = frow(x, t) + h * dim;
      for (int64_t i = 0; i < r; ++i) {
        const float angle = (float)pos[t] * inv_freq[i];
        const float c = cosf(angle), sn = sinf(angle), a = v[i], bb = v[i + r];
        v[i] = mscale * (a * c - bb * sn);
        v[i + r] = mscale * (bb * c + a * sn);
      }
    }
  }
}

static strata_status minimal_rope(strata_backend b, strata_stream s, strata_tensor* q,
                                  strata_tensor* k, const strata_tensor* positions,
                                  const strata_tensor* inv_freq, float mscale) {
  (void)s;
  if (!tensor_ok(q, F32, 3, DIMS(-1, -1, -1)) || !tensor_ok(inv_freq, F32, 1, DIMS(-1)) ||
      !tensor_ok(positions, I32, 1, DIMS(q->shape[0])) ||
      (k != NULL && !tensor_ok(k, F32, 3, DIMS(q->shape[0], -1, q->shape[2]))) ||
      2 * inv_freq->shape[0] > q->shape[2]) {
    return fail(
        b, STRATA_ERR_INVALID_ARGUMENT,
        "rope: q [T, Hq, D], k [T, Hk, D] or NULL, positions i32 [T], inv_freq f32 [R <= D/2]");
  }
  const int32_t* pos = (const int32_t*)positions->data;
  rotate(q, pos, (const float*)inv_freq->data, inv_freq->shape[0], mscale);
  if (k != NULL) rotate(k, pos, (const float*)inv_freq->data, inv_freq->shape[0], mscale);
  return STRATA_OK;
}

static strata_status minimal_silu_mul(strata_backend b, strata_stream s, const strata_tensor* x,
                                      strata_tensor* out) {
  (void)s;
  if (!tensor_ok(x, F32, 2, DIMS(-1, -1)) || x->shape[1] % 2 != 0 ||
      !tensor_ok(out, F32, 2, DIMS(x->shape[0], x->shape[1] / 2))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "silu_mul: x f32 [T, 2I], out f32 [T, I]");
  }
  const int64_t inter = out->shape[1];
  for (int64_t t = 0; t < x->shape[0]; ++t) {
    const float* gate = frow(x, t);
    float* o = frow(out, t);
    for (int64_t i = 0; i < inter; ++i) o[i] = gate[i] / (1.0f + expf(-gate[i])) * gate[inter + i];
  }
  return STRATA_OK;
}

static strata_status minimal_gather_rows(strata_backend b, strata_stream s, const strata_tensor* x,
                                         const strata_tensor* rows, strata_tensor* out) {
  (void)s;
  if (!tensor_ok(x, F32, 2, DIMS(-1, -1)) || !tensor_ok(rows, I32, 1, DIMS(-1)) ||
      !tensor_ok(out, F32, 2, DIMS(rows->shape[0], x->shape[1]))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "gather_rows: x [T, H], rows i32 [N], out [N, H]");
  }
  for (int64_t i = 0; i < rows->shape[0]; ++i) {
    const int32_t row = *irow(rows, i);
    if (row < 0 || row >= x->shape[0]) return fail(b, STRATA_ERR_INVALID_ARGUMENT, "row %d", row);
  }
  for (int64_t i = 0; i < rows->shape[0]; ++i) {
    memcpy(frow(out, i), frow(x, *irow(rows, i)), (size_t)x->shape[1] * sizeof(float));
  }
  return STRATA_OK;
}

/* ---- KV cache ------------------------------------------------------------------------------ */

static int cache_ok(const strata_kv_cache* c) {
  return c != NULL && c->data != NULL && c->dtype == F32 && c->num_blocks > 0 &&
         c->num_layers > 0 && c->block_size > 0 && c->num_kv_heads > 0 && c->head_dim > 0;
}

/* Start of (block, layer, K or V, offset in block) in the pool; see abi.h for the layout. */
static float* kv_at(const strata_kv_cache* c, int64_t block, int64_t layer, int64_t kv,
                    int64_t offset) {
  const int64_t token = (int64_t)c->num_kv_heads * c->head_dim;
  return (float*)c->data +
         (((block * c->num_layers + layer) * 2 + kv) * c->block_size + offset) * token;
}

static size_t block_bytes(const strata_kv_cache* c) {
  return (size_t)c->num_layers * 2 * c->block_size * c->num_kv_heads * c->head_dim * sizeof(float);
}

static strata_status minimal_kv_append(strata_backend b, strata_stream s,
                                       const strata_kv_cache* cache, int32_t layer,
                                       const strata_tensor* k, const strata_tensor* v,
                                       const strata_tensor* slots) {
  (void)s;
  if (!cache_ok(cache) || layer < 0 || layer >= cache->num_layers ||
      !tensor_ok(slots, I32, 1, DIMS(-1))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_append: bad cache, layer %d or slots", layer);
  }
  const int64_t tokens = slots->shape[0], heads = cache->num_kv_heads, dim = cache->head_dim;
  if (!tensor_ok(k, F32, 3, DIMS(tokens, heads, dim)) ||
      !tensor_ok(v, F32, 3, DIMS(tokens, heads, dim))) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_append: k, v must be f32 [T, Hk, D]");
  }
  for (int64_t t = 0; t < tokens; ++t) {
    if (*irow(slots, t) >= (int64_t)cache->num_blocks * cache->block_size) {
      return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_append: slot %d", *irow(slots, t));
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t slot = *irow(slots, t);
    if (slot < 0) continue; /* padding row */
    const int64_t block = slot / cache->block_size, offset = slot % cache->block_size;
    memcpy(kv_at(cache, block, layer, 0, offset), frow(k, t),
           (size_t)(heads * dim) * sizeof(float));
    memcpy(kv_at(cache, block, layer, 1, offset), frow(v, t),
           (size_t)(heads * dim) * sizeof(float));
  }
  return STRATA_OK;
}

static int block_ids_ok(const strata_kv_cache* c, const strata_tensor* blocks) {
  if (!tensor_ok(blocks, I32, 1, DIMS(-1))) return 0;
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    if (*irow(blocks, i) < 0 || *irow(blocks, i) >= c->num_blocks) return 0;
  }
  return 1;
}

static strata_status minimal_kv_copy_blocks(strata_backend b, strata_stream s,
                                            const strata_kv_cache* cache, const strata_tensor* src,
                                            const strata_tensor* dst) {
  (void)s;
  if (!cache_ok(cache) || !block_ids_ok(cache, src) || !block_ids_ok(cache, dst) ||
      src->shape[0] != dst->shape[0]) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_copy_blocks: bad cache or block ids");
  }
  const size_t bytes = block_bytes(cache);
  for (int64_t i = 0; i < src->shape[0]; ++i) {
    memmove((char*)cache->data + *irow(dst, i) * bytes, (char*)cache->data + *irow(src, i) * bytes,
            bytes);
  }
  return STRATA_OK;
}

static strata_status minimal_kv_gather(strata_backend b, strata_stream s,
                                       const strata_kv_cache* cache, const strata_tensor* blocks,
                                       void* dst) {
  (void)s;
  if (!cache_ok(cache) || !block_ids_ok(cache, blocks) || dst == NULL) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_gather: bad cache, block ids or dst");
  }
  const size_t bytes = block_bytes(cache);
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    memcpy((char*)dst + i * bytes, (char*)cache->data + *irow(blocks, i) * bytes, bytes);
  }
  return STRATA_OK;
}

static strata_status minimal_kv_scatter(strata_backend b, strata_stream s,
                                        const strata_kv_cache* cache, const strata_tensor* blocks,
                                        const void* src) {
  (void)s;
  if (!cache_ok(cache) || !block_ids_ok(cache, blocks) || src == NULL) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "kv_scatter: bad cache, block ids or src");
  }
  const size_t bytes = block_bytes(cache);
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    memcpy((char*)cache->data + *irow(blocks, i) * bytes, (const char*)src + i * bytes, bytes);
  }
  return STRATA_OK;
}

/* ---- attention ---------------------------------------------------------------------------- */

/* 1 if the batch matches `rows` query rows and the cache (and, for decode, has one row per
 * sequence). */
static int batch_ok(const strata_kv_cache* c, const strata_attention_batch* batch, int64_t rows,
                    int decode) {
  if (batch == NULL || batch->num_seqs <= 0 || batch->max_blocks_per_seq <= 0 ||
      batch->q_start == NULL || batch->kv_len == NULL || batch->block_tables == NULL ||
      batch->q_start[0] != 0 || batch->q_start[batch->num_seqs] != rows) {
    return 0;
  }
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    const int32_t q_len = batch->q_start[s + 1] - batch->q_start[s], kv_len = batch->kv_len[s];
    if (q_len < 0 || kv_len < q_len || (decode && batch->q_start[s] != s) ||
        kv_len > (int64_t)batch->max_blocks_per_seq * c->block_size) {
      return 0;
    }
    for (int32_t i = 0; i * c->block_size < kv_len; ++i) {
      const int32_t id = batch->block_tables[(int64_t)s * batch->max_blocks_per_seq + i];
      if (id < 0 || id >= c->num_blocks) return 0;
    }
  }
  return 1;
}

/* One query vector of one head against positions [lo, pos] of one sequence. */
static void attend(const strata_kv_cache* c, const int32_t* table, int32_t layer, float scale,
                   int64_t lo, int64_t pos, int64_t kv_head, const float* q, float* out,
                   float* scores) {
  const int64_t dim = c->head_dim, bs = c->block_size;
  float max_score = -INFINITY, sum = 0.0f;
  for (int64_t p = lo; p <= pos; ++p) {
    const float* key = kv_at(c, table[p / bs], layer, 0, p % bs) + kv_head * dim;
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot += q[d] * key[d];
    scores[p - lo] = dot * scale;
    if (scores[p - lo] > max_score) max_score = scores[p - lo];
  }
  for (int64_t d = 0; d < dim; ++d) out[d] = 0.0f;
  for (int64_t p = lo; p <= pos; ++p) {
    const float w = expf(scores[p - lo] - max_score);
    const float* value = kv_at(c, table[p / bs], layer, 1, p % bs) + kv_head * dim;
    sum += w;
    for (int64_t d = 0; d < dim; ++d) out[d] += w * value[d];
  }
  for (int64_t d = 0; d < dim; ++d) out[d] /= sum;
}

static strata_status attention(strata_backend b, const strata_kv_cache* c,
                               const strata_attention_batch* batch,
                               const strata_attention_params* params, const strata_tensor* q,
                               strata_tensor* out, int decode) {
  if (!cache_ok(c) || !tensor_ok(q, F32, 3, DIMS(-1, -1, c->head_dim)) ||
      q->shape[1] % c->num_kv_heads != 0 || !same_shape(out, q) || params == NULL ||
      params->layer < 0 || params->layer >= c->num_layers || params->sliding_window < 0 ||
      !batch_ok(c, batch, q->shape[0], decode)) {
    return fail(b, STRATA_ERR_INVALID_ARGUMENT, "attention: bad cache, q, out, params or batch");
  }
  int64_t longest = 1; /* max_kv_len is only a hint: size the scratch from kv_len itself */
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    if (batch->kv_len[s] > longest) longest = batch->kv_len[s];
  }
  float* scores = malloc((size_t)longest * sizeof(float));
  if (scores == NULL) return fail(b, STRATA_ERR_OUT_OF_MEMORY, "attention: scores");
  const int64_t heads = q->shape[1], group = heads / c->num_kv_heads, dim = c->head_dim;
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    const int32_t* table = batch->block_tables + (int64_t)s * batch->max_blocks_per_seq;
    const int32_t first = batch->q_start[s], q_len = batch->q_start[s + 1] - first;
    for (int32_t j = 0; j < q_len; ++j) {
      const int64_t pos = batch->kv_len[s] - q_len + j;
      const int64_t window = params->sliding_window;
      const int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
      for (int64_t h = 0; h < heads; ++h) {
        attend(c, table, params->layer, params->scale, lo, pos, h / group,
               frow(q, first + j) + h * dim, frow(out, first + j) + h * dim, scores);
      }
    }
  }
  free(scores);
  return STRATA_OK;
}

static strata_status minimal_attention_prefill(strata_backend b, strata_stream s,
                                               const strata_kv_cache* cache,
                                               const strata_attention_batch* batch,
                                               const strata_attention_params* params,
                                               const strata_tensor* q, strata_tensor* out) {
  (void)s;
  return attention(b, cache, batch, params, q, out, 0);
}

static strata_status minimal_attention_decode(strata_backend b, strata_stream s,
                                              const strata_kv_cache* cache,
                                              const strata_attention_batch* batch,
                                              const strata_attention_params* params,
                                              const strata_tensor* q, strata_tensor* out) {
  (void)s;
  return attention(b, cache, batch, params, q, out, 1);
}

/* ---- the table ------------------------------------------------------------------------------- */

static const strata_plugin_api_v1 kMinimalApi = {
    .api_version = STRATA_PLUGIN_API_VERSION,
    .struct_size = sizeof(strata_plugin_api_v1),
    .plugin_name = "minimal",
    .create = minimal_create,
    .destroy = minimal_destroy,
    .last_error = minimal_last_error,
    .get_info = minimal_get_info,
    .alloc = minimal_alloc,
    .free = minimal_free,
    .stream_create = minimal_stream_create,
    .stream_destroy = minimal_stream_destroy,
    .stream_synchronize = minimal_stream_synchronize,
    .copy_h2d = minimal_copy,
    .copy_d2h = minimal_copy,
    .copy_d2d = minimal_copy,
    .embedding = minimal_embedding,
    .rms_norm = minimal_rms_norm,
    .gemm = minimal_gemm,
    .rope = minimal_rope,
    .silu_mul = minimal_silu_mul,
    .gather_rows = minimal_gather_rows,
    .kv_append = minimal_kv_append,
    .attention_prefill = minimal_attention_prefill,
    .attention_decode = minimal_attention_decode,
    .kv_copy_blocks = minimal_kv_copy_blocks,
    .kv_gather = minimal_kv_gather,
    .kv_scatter = minimal_kv_scatter,
    .moe_route = NULL, /* optional: this plugin has no MoE support */
    .moe_experts = NULL,
};

STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
  return &kMinimalApi;
}
