// The naive reference plugin: KV cache ops and paged attention, straight from the ABI's
// definitions (one query row and one head at a time, two-pass softmax in double).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "naive_internal.h"

namespace strata::naive {
namespace {

std::string CheckKvTensor(const strata_kv_cache& c, const strata_tensor* t, const char* name,
                          int64_t tokens) {
  return ExpectTensor(t, name, {tokens, c.num_kv_heads, c.head_dim}, Kind::kFloat);
}

// "" if every block id of `blocks` is inside the pool, else a message.
std::string CheckBlockIds(const strata_kv_cache& c, const strata_tensor* blocks, const char* name) {
  std::string err = ExpectTensor(blocks, name, {-1}, Kind::kI32);
  if (!err.empty()) return err;
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    const int32_t id = IntAt(*blocks, i);
    if (id < 0 || id >= c.num_blocks) return absl::StrCat(name, "[", i, "] = ", id);
  }
  return "";
}

// "" if the batch agrees with the cache and with `rows` query rows, else a message.
std::string CheckBatch(const strata_kv_cache& c, const strata_attention_batch* batch, int64_t rows,
                       bool decode) {
  if (batch == nullptr || batch->q_start == nullptr || batch->kv_len == nullptr ||
      batch->block_tables == nullptr) {
    return "batch: NULL";
  }
  const int32_t n = batch->num_seqs, max_blocks = batch->max_blocks_per_seq;
  if (n <= 0 || max_blocks <= 0) return "batch: num_seqs and max_blocks_per_seq must be > 0";
  if (batch->q_start[0] != 0 || batch->q_start[n] != rows) {
    return absl::StrCat("batch: q_start must run from 0 to the ", rows, " rows of q");
  }
  for (int32_t s = 0; s < n; ++s) {
    const int32_t q_len = batch->q_start[s + 1] - batch->q_start[s];
    const int32_t kv_len = batch->kv_len[s];
    if (decode && batch->q_start[s] != s) return "batch: decode needs one query row per sequence";
    if (q_len < 0 || kv_len < q_len || kv_len > int64_t{max_blocks} * c.block_size) {
      return absl::StrCat("batch: sequence ", s, " has ", q_len, " query rows, kv_len ", kv_len);
    }
    for (int32_t i = 0; i < (kv_len + c.block_size - 1) / c.block_size; ++i) {
      const int32_t id = batch->block_tables[int64_t{s} * max_blocks + i];
      if (id < 0 || id >= c.num_blocks) {
        return absl::StrCat("batch: block_tables[", s, "][", i, "] = ", id);
      }
    }
  }
  return "";
}

std::string CheckAttentionArgs(const strata_kv_cache* cache, const strata_attention_batch* batch,
                               const strata_attention_params* params, const strata_tensor* q,
                               const strata_tensor* out, bool decode) {
  std::string err = ExpectCache(cache);
  if (err.empty()) err = ExpectTensor(q, "q", {-1, -1, cache->head_dim}, Kind::kFloat);
  if (!err.empty()) return err;
  if (q->shape[1] % cache->num_kv_heads != 0) return "q: heads not a multiple of kv heads";
  err = ExpectTensor(out, "out", {q->shape[0], q->shape[1], q->shape[2]}, Kind::kFloat);
  if (!err.empty()) return err;
  if (params == nullptr || params->layer < 0 || params->layer >= cache->num_layers ||
      params->sliding_window < 0) {
    return "params: NULL, layer out of range or negative sliding_window";
  }
  return CheckBatch(*cache, batch, q->shape[0], decode);
}

// One sequence's view of the paged cache for one layer.
struct SeqKv {
  const strata_kv_cache* cache;
  const int32_t* table;
  int64_t layer;

  double At(int64_t kv, int64_t pos, int64_t head, int64_t dim) const {
    const int64_t bs = cache->block_size;
    return LoadElem(cache->data, cache->dtype,
                    KvIndex(*cache, table[pos / bs], layer, kv, pos % bs, head, dim));
  }
};

// out = softmax(scale * q.K[lo..pos]) . V[lo..pos] for one query vector of one head.
void AttendOne(const SeqKv& kv, const strata_attention_params& params, int64_t pos, int64_t kv_head,
               const std::vector<double>& q, std::vector<double>* out) {
  const int64_t dim = static_cast<int64_t>(q.size());
  const int64_t lo =
      params.sliding_window > 0 ? std::max<int64_t>(0, pos - params.sliding_window + 1) : 0;
  std::vector<double> scores(pos - lo + 1);
  double max_score = -INFINITY;
  for (int64_t p = lo; p <= pos; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d) dot += q[d] * kv.At(0, p, kv_head, d);
    scores[p - lo] = dot * static_cast<double>(params.scale);
    max_score = std::max(max_score, scores[p - lo]);
  }
  double sum = 0;
  std::fill(out->begin(), out->end(), 0.0);
  for (int64_t p = lo; p <= pos; ++p) {
    const double w = std::exp(scores[p - lo] - max_score);
    sum += w;
    for (int64_t d = 0; d < dim; ++d) (*out)[d] += w * kv.At(1, p, kv_head, d);
  }
  for (double& v : *out) v /= sum;
}

strata_status Attention(strata_backend b, const strata_kv_cache* cache,
                        const strata_attention_batch* batch, const strata_attention_params* params,
                        const strata_tensor* q, strata_tensor* out, bool decode) {
  STRATA_NAIVE_CHECK(b, CheckAttentionArgs(cache, batch, params, q, out, decode));
  const int64_t heads = q->shape[1], dim = q->shape[2];
  const int64_t group = heads / cache->num_kv_heads;
  std::vector<double> qv(dim), ov(dim);
  for (int32_t s = 0; s < batch->num_seqs; ++s) {
    const SeqKv kv{cache, batch->block_tables + int64_t{s} * batch->max_blocks_per_seq,
                   params->layer};
    const int32_t first = batch->q_start[s], q_len = batch->q_start[s + 1] - first;
    for (int32_t j = 0; j < q_len; ++j) {
      const int64_t pos = batch->kv_len[s] - q_len + j;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < dim; ++d) qv[d] = naive::At(*q, first + j, h * dim + d);
        AttendOne(kv, *params, pos, h / group, qv, &ov);
        for (int64_t d = 0; d < dim; ++d) Set(*out, first + j, h * dim + d, ov[d]);
      }
    }
  }
  return STRATA_OK;
}

}  // namespace

std::string CheckKvAppendArgs(const strata_kv_cache* cache, int32_t layer, const strata_tensor* k,
                              const strata_tensor* v, const strata_tensor* slots) {
  std::string err = ExpectCache(cache);
  if (!err.empty()) return err;
  if (layer < 0 || layer >= cache->num_layers) return absl::StrCat("layer ", layer);
  err = ExpectTensor(slots, "slots", {-1}, Kind::kI32);
  if (!err.empty()) return err;
  const int64_t tokens = slots->shape[0];
  err = CheckKvTensor(*cache, k, "k", tokens);
  if (err.empty()) err = CheckKvTensor(*cache, v, "v", tokens);
  if (!err.empty()) return err;
  for (int64_t t = 0; t < tokens; ++t) {
    if (IntAt(*slots, t) >= int64_t{cache->num_blocks} * cache->block_size) {
      return absl::StrCat("slots[", t, "] = ", IntAt(*slots, t));
    }
  }
  return "";
}

strata_status KvAppend(strata_backend b, strata_stream, const strata_kv_cache* cache, int32_t layer,
                       const strata_tensor* k, const strata_tensor* v, const strata_tensor* slots) {
  STRATA_NAIVE_CHECK(b, CheckKvAppendArgs(cache, layer, k, v, slots));
  const int64_t tokens = slots->shape[0];
  const int64_t bs = cache->block_size, row = cache->num_kv_heads * cache->head_dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t slot = IntAt(*slots, t);
    if (slot < 0) continue;
    const int64_t k_base = KvIndex(*cache, slot / bs, layer, 0, slot % bs, 0, 0);
    const int64_t v_base = KvIndex(*cache, slot / bs, layer, 1, slot % bs, 0, 0);
    for (int64_t i = 0; i < row; ++i) {
      StoreElem(cache->data, cache->dtype, k_base + i, At(*k, t, i));
      StoreElem(cache->data, cache->dtype, v_base + i, At(*v, t, i));
    }
  }
  return STRATA_OK;
}

strata_status AttentionPrefill(strata_backend b, strata_stream, const strata_kv_cache* cache,
                               const strata_attention_batch* batch,
                               const strata_attention_params* params, const strata_tensor* q,
                               strata_tensor* out) {
  return Attention(b, cache, batch, params, q, out, /*decode=*/false);
}

strata_status AttentionDecode(strata_backend b, strata_stream, const strata_kv_cache* cache,
                              const strata_attention_batch* batch,
                              const strata_attention_params* params, const strata_tensor* q,
                              strata_tensor* out) {
  return Attention(b, cache, batch, params, q, out, /*decode=*/true);
}

strata_status KvCopyBlocks(strata_backend b, strata_stream, const strata_kv_cache* cache,
                           const strata_tensor* src_blocks, const strata_tensor* dst_blocks) {
  STRATA_NAIVE_CHECK(b, ExpectCache(cache));
  STRATA_NAIVE_CHECK(b, CheckBlockIds(*cache, src_blocks, "src_blocks"));
  STRATA_NAIVE_CHECK(b, CheckBlockIds(*cache, dst_blocks, "dst_blocks"));
  if (src_blocks->shape[0] != dst_blocks->shape[0]) return Invalid(b, "src/dst lengths differ");
  const size_t bytes = KvBlockBytes(*cache);
  auto* pool = static_cast<char*>(cache->data);
  for (int64_t i = 0; i < src_blocks->shape[0]; ++i) {
    std::memmove(pool + IntAt(*dst_blocks, i) * bytes, pool + IntAt(*src_blocks, i) * bytes, bytes);
  }
  return STRATA_OK;
}

strata_status KvGather(strata_backend b, strata_stream, const strata_kv_cache* cache,
                       const strata_tensor* blocks, void* dst) {
  STRATA_NAIVE_CHECK(b, ExpectCache(cache));
  STRATA_NAIVE_CHECK(b, CheckBlockIds(*cache, blocks, "blocks"));
  if (dst == nullptr) return Invalid(b, "dst: NULL");
  const size_t bytes = KvBlockBytes(*cache);
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    std::memcpy(static_cast<char*>(dst) + i * bytes,
                static_cast<const char*>(cache->data) + IntAt(*blocks, i) * bytes, bytes);
  }
  return STRATA_OK;
}

strata_status KvScatter(strata_backend b, strata_stream, const strata_kv_cache* cache,
                        const strata_tensor* blocks, const void* src) {
  STRATA_NAIVE_CHECK(b, ExpectCache(cache));
  STRATA_NAIVE_CHECK(b, CheckBlockIds(*cache, blocks, "blocks"));
  if (src == nullptr) return Invalid(b, "src: NULL");
  const size_t bytes = KvBlockBytes(*cache);
  for (int64_t i = 0; i < blocks->shape[0]; ++i) {
    std::memcpy(static_cast<char*>(cache->data) + IntAt(*blocks, i) * bytes,
                static_cast<const char*>(src) + i * bytes, bytes);
  }
  return STRATA_OK;
}

}  // namespace strata::naive
