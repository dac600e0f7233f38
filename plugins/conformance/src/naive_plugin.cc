// The naive reference plugin: lifecycle, memory, element access and the dense ops. Every op
// validates its arguments, then evaluates the ABI's formula element by element in double.
#include "strata/plugin/naive_plugin.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "naive_internal.h"
#include "nlohmann/json.hpp"
#include "strata/common/half.h"

namespace strata::naive {
namespace {

NaiveBackend* Self(strata_backend b) { return reinterpret_cast<NaiveBackend*>(b); }

constexpr size_t kAlignment = 64;

}  // namespace

strata_status Fail(strata_backend b, strata_status code, std::string message) {
  Self(b)->last_error = std::move(message);
  return code;
}

// --- element access -----------------------------------------------------------------------
int64_t RowElems(const strata_tensor& t) {
  int64_t n = 1;
  for (int i = 1; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

int64_t RowStride(const strata_tensor& t) { return t.row_stride ? t.row_stride : RowElems(t); }

double LoadElem(const void* base, strata_dtype dtype, int64_t i) {
  switch (dtype) {
    case STRATA_DTYPE_F32:
      return static_cast<const float*>(base)[i];
    case STRATA_DTYPE_BF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case STRATA_DTYPE_F16:
      return F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case STRATA_DTYPE_I32:
      return static_cast<const int32_t*>(base)[i];
  }
  return 0;
}

void StoreElem(void* base, strata_dtype dtype, int64_t i, double v) {
  const float f = static_cast<float>(v);
  switch (dtype) {
    case STRATA_DTYPE_F32:
      static_cast<float*>(base)[i] = f;
      break;
    case STRATA_DTYPE_BF16:
      static_cast<uint16_t*>(base)[i] = FloatToBf16(f);
      break;
    case STRATA_DTYPE_F16:
      static_cast<uint16_t*>(base)[i] = FloatToF16(f);
      break;
    case STRATA_DTYPE_I32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
  }
}

int64_t KvIndex(const strata_kv_cache& c, int64_t block, int64_t layer, int64_t kv, int64_t offset,
                int64_t head, int64_t dim) {
  return ((((block * c.num_layers + layer) * 2 + kv) * c.block_size + offset) * c.num_kv_heads +
          head) *
             c.head_dim +
         dim;
}

size_t KvBlockBytes(const strata_kv_cache& c) {
  return static_cast<size_t>(KvIndex(c, 1, 0, 0, 0, 0, 0)) * (c.dtype == STRATA_DTYPE_F32 ? 4 : 2);
}

// --- argument checks ------------------------------------------------------------------------
namespace {

bool KindMatches(strata_dtype dtype, Kind kind) {
  switch (kind) {
    case Kind::kFloat:
      return dtype == STRATA_DTYPE_F32 || dtype == STRATA_DTYPE_BF16 || dtype == STRATA_DTYPE_F16;
    case Kind::kF32:
      return dtype == STRATA_DTYPE_F32;
    case Kind::kI32:
      return dtype == STRATA_DTYPE_I32;
  }
  return false;
}

}  // namespace

std::string ExpectTensor(const strata_tensor* t, const char* name,
                         std::initializer_list<int64_t> dims, Kind kind) {
  if (t == nullptr || t->data == nullptr) return absl::StrCat(name, ": NULL tensor");
  if (!KindMatches(t->dtype, kind)) return absl::StrCat(name, ": wrong dtype ", t->dtype);
  if (t->ndim != static_cast<int32_t>(dims.size())) {
    return absl::StrCat(name, ": expected ", dims.size(), " dims, got ", t->ndim);
  }
  int i = 0;
  for (int64_t want : dims) {
    const int64_t got = t->shape[i];
    if (got <= 0 || (want >= 0 && got != want)) {
      return absl::StrCat(name, ": dim ", i, " is ", got, ", expected ", want);
    }
    ++i;
  }
  if (t->row_stride != 0 && t->row_stride < RowElems(*t)) {
    return absl::StrCat(name, ": row_stride ", t->row_stride, " < row size ", RowElems(*t));
  }
  return "";
}

std::string ExpectCache(const strata_kv_cache* c) {
  if (c == nullptr || c->data == nullptr) return "cache: NULL";
  if (!KindMatches(c->dtype, Kind::kFloat)) return "cache: dtype must be f32, bf16 or f16";
  if (c->num_blocks <= 0 || c->num_layers <= 0 || c->block_size <= 0 || c->num_kv_heads <= 0 ||
      c->head_dim <= 0) {
    return "cache: non-positive dimension";
  }
  return "";
}

// --- lifecycle, memory, streams ----------------------------------------------------------------
namespace {

struct NaiveStream {
  int unused = 0;
};

// The message of this thread's last failed create (last_error(NULL), as the ABI says).
thread_local std::string create_error;

strata_status Create(const char* config_json, strata_backend* out) {
  auto backend = std::make_unique<NaiveBackend>();
  if (config_json != nullptr && config_json[0] != '\0') {
    auto config = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      create_error = "create: config is not a JSON object";
      return STRATA_ERR_INVALID_ARGUMENT;
    }
    const std::string dtype = config.value("dtype", "f32");
    if (dtype == "bf16") {
      backend->dtype = STRATA_DTYPE_BF16;
    } else if (dtype == "f16") {
      backend->dtype = STRATA_DTYPE_F16;
    } else if (dtype != "f32") {
      create_error = "create: dtype must be f32, bf16 or f16, got " + dtype;
      return STRATA_ERR_INVALID_ARGUMENT;
    }
  }
  *out = reinterpret_cast<strata_backend>(backend.release());
  return STRATA_OK;
}

void Destroy(strata_backend b) { delete Self(b); }

const char* LastError(strata_backend b) {
  return b == nullptr ? create_error.c_str() : Self(b)->last_error.c_str();
}

strata_status GetInfo(strata_backend b, strata_backend_info* out) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  out->name = "naive";
  out->device_name = "host (naive reference, double accumulation)";
  out->weight_dtype = Self(b)->dtype;
  out->act_dtype = Self(b)->dtype;
  out->kv_dtype = Self(b)->dtype;
  out->total_memory = page * static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES));
  out->free_memory = page * static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES));
  return STRATA_OK;
}

strata_status Alloc(strata_backend b, size_t bytes, void** out) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  *out = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (*out == nullptr) {
    return Fail(b, STRATA_ERR_OUT_OF_MEMORY, absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  return STRATA_OK;
}

void Free(strata_backend, void* ptr) { std::free(ptr); }

strata_status StreamCreate(strata_backend, strata_stream* out) {
  *out = reinterpret_cast<strata_stream>(new NaiveStream());
  return STRATA_OK;
}

void StreamDestroy(strata_backend, strata_stream s) { delete reinterpret_cast<NaiveStream*>(s); }

strata_status StreamSynchronize(strata_backend, strata_stream) { return STRATA_OK; }

strata_status Copy(strata_backend, strata_stream, void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memmove(dst, src, bytes);
  return STRATA_OK;
}

// Device memory is host memory: every run is checked first (a failing call writes nothing),
// then copied with memcpy.
strata_status CopyRuns(strata_backend b, strata_stream, void* dst, const void* src,
                       const strata_copy_run* runs, int64_t n) {
  if (n < 0) return Invalid(b, absl::StrCat("copy_runs: n = ", n));
  if (n > 0 && (dst == nullptr || src == nullptr || runs == nullptr)) {
    return Invalid(b, "copy_runs: dst, src or runs is NULL");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (runs[i].bytes == 0) return Invalid(b, absl::StrCat("copy_runs: runs[", i, "] is empty"));
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(static_cast<char*>(dst) + runs[i].dst_offset,
                static_cast<const char*>(src) + runs[i].src_offset, runs[i].bytes);
  }
  return STRATA_OK;
}

// Nothing to page-lock: copies to and from host memory are synchronous here. The entries exist
// so that cases needing host_register run with the naive reference as the candidate too.
strata_status HostRegister(strata_backend b, void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) return Invalid(b, "host_register: ptr is NULL or bytes is 0");
  return STRATA_OK;
}

void HostUnregister(strata_backend, void*) {}

// --- dense ops ----------------------------------------------------------------------------------
strata_status Embedding(strata_backend b, strata_stream, const strata_tensor* table,
                        const strata_tensor* ids, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(table, "table", {-1, -1}, Kind::kFloat));
  const int64_t vocab = table->shape[0], hidden = table->shape[1];
  STRATA_NAIVE_CHECK(b, ExpectTensor(ids, "ids", {-1}, Kind::kI32));
  const int64_t tokens = ids->shape[0];
  STRATA_NAIVE_CHECK(b, ExpectTensor(out, "out", {tokens, hidden}, Kind::kFloat));
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t id = IntAt(*ids, t);
    if (id < 0 || id >= vocab) return Invalid(b, absl::StrCat("ids[", t, "] = ", id));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) Set(*out, t, h, At(*table, IntAt(*ids, t), h));
  }
  return STRATA_OK;
}

std::string CheckRmsNormArgs(const strata_tensor* x, const strata_tensor* residual,
                             const strata_tensor* weight, const strata_tensor* out) {
  if (x == nullptr || (x->ndim != 2 && x->ndim != 3)) return "x: expected [T, H] or [T, h, D]";
  const bool three = x->ndim == 3;
  const int64_t t = x->shape[0], h = x->shape[1], d = three ? x->shape[2] : 0;
  auto same_shape = [&](const strata_tensor* y, const char* name) {
    return three ? ExpectTensor(y, name, {t, h, d}, Kind::kFloat)
                 : ExpectTensor(y, name, {t, h}, Kind::kFloat);
  };
  std::string err = same_shape(x, "x");
  if (err.empty() && residual != nullptr) err = same_shape(residual, "residual");
  if (err.empty()) err = same_shape(out, "out");
  if (err.empty()) err = ExpectTensor(weight, "weight", {three ? d : h}, Kind::kFloat);
  return err;
}

strata_status RmsNorm(strata_backend b, strata_stream, const strata_tensor* x,
                      strata_tensor* residual, const strata_tensor* weight, float eps,
                      strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, CheckRmsNormArgs(x, residual, weight, out));
  const int64_t dim = x->shape[x->ndim - 1];
  const int64_t vectors_per_row = x->ndim == 3 ? x->shape[1] : 1;
  std::vector<double> v(dim);
  for (int64_t t = 0; t < x->shape[0]; ++t) {
    for (int64_t j = 0; j < vectors_per_row; ++j) {
      double sum_sq = 0;
      for (int64_t i = 0; i < dim; ++i) {
        const int64_t col = j * dim + i;
        v[i] = At(*x, t, col);
        if (residual != nullptr) {
          Set(*residual, t, col, At(*residual, t, col) + v[i]);
          v[i] = At(*residual, t, col);  // the stored (rounded) sum is what gets normalized
        }
        sum_sq += v[i] * v[i];
      }
      const double inv_rms = 1.0 / std::sqrt(sum_sq / dim + static_cast<double>(eps));
      for (int64_t i = 0; i < dim; ++i) {
        Set(*out, t, j * dim + i, v[i] * inv_rms * At(*weight, i, 0));
      }
    }
  }
  return STRATA_OK;
}

strata_status Gemm(strata_backend b, strata_stream, const strata_tensor* x, const strata_tensor* w,
                   const strata_tensor* bias, int32_t accumulate, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(x, "x", {-1, -1}, Kind::kFloat));
  const int64_t m_rows = x->shape[0], k_dim = x->shape[1];
  STRATA_NAIVE_CHECK(b, ExpectTensor(w, "w", {-1, k_dim}, Kind::kFloat));
  const int64_t n_cols = w->shape[0];
  if (bias != nullptr) STRATA_NAIVE_CHECK(b, ExpectTensor(bias, "bias", {n_cols}, Kind::kFloat));
  STRATA_NAIVE_CHECK(b, ExpectTensor(out, "out", {m_rows, n_cols}, Kind::kFloat));
  for (int64_t m = 0; m < m_rows; ++m) {
    for (int64_t n = 0; n < n_cols; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < k_dim; ++k) acc += At(*x, m, k) * At(*w, n, k);
      if (bias != nullptr) acc += At(*bias, n, 0);
      if (accumulate != 0) acc += At(*out, m, n);
      Set(*out, m, n, acc);
    }
  }
  return STRATA_OK;
}

// Rotates the first 2R dims of every head of `x` [T, heads, D] in place.
void RotateHeads(const strata_tensor& x, const strata_tensor& positions,
                 const strata_tensor& inv_freq, double mscale) {
  const int64_t heads = x.shape[1], dim = x.shape[2], half = inv_freq.shape[0];
  for (int64_t t = 0; t < x.shape[0]; ++t) {
    const float pos = static_cast<float>(IntAt(positions, t));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        // The angle is the fp32 product, as in Hugging Face's rotary embedding.
        const float angle = pos * static_cast<const float*>(inv_freq.data)[i];
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const int64_t col = h * dim + i;
        const double x0 = At(x, t, col), x1 = At(x, t, col + half);
        Set(x, t, col, mscale * (x0 * c - x1 * s));
        Set(x, t, col + half, mscale * (x1 * c + x0 * s));
      }
    }
  }
}

strata_status Rope(strata_backend b, strata_stream, strata_tensor* q, strata_tensor* k,
                   const strata_tensor* positions, const strata_tensor* inv_freq, float mscale) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(q, "q", {-1, -1, -1}, Kind::kFloat));
  const int64_t tokens = q->shape[0], dim = q->shape[2];
  if (k != nullptr) STRATA_NAIVE_CHECK(b, ExpectTensor(k, "k", {tokens, -1, dim}, Kind::kFloat));
  STRATA_NAIVE_CHECK(b, ExpectTensor(positions, "positions", {tokens}, Kind::kI32));
  STRATA_NAIVE_CHECK(b, ExpectTensor(inv_freq, "inv_freq", {-1}, Kind::kF32));
  if (2 * inv_freq->shape[0] > dim) {
    return Invalid(b,
                   absl::StrCat("inv_freq has ", inv_freq->shape[0], " entries, head_dim ", dim));
  }
  RotateHeads(*q, *positions, *inv_freq, mscale);
  if (k != nullptr) RotateHeads(*k, *positions, *inv_freq, mscale);
  return STRATA_OK;
}

// The composition the ABI defines, checked as a whole before anything is written.
strata_status AttentionPrologue(strata_backend b, strata_stream s, strata_tensor* q,
                                strata_tensor* k, const strata_tensor* v,
                                const strata_tensor* q_norm, const strata_tensor* k_norm, float eps,
                                const strata_tensor* positions, const strata_tensor* inv_freq,
                                float mscale, const strata_kv_cache* cache, int32_t layer,
                                const strata_tensor* slots) {
  STRATA_NAIVE_CHECK(b, CheckKvAppendArgs(cache, layer, k, v, slots));
  const int64_t tokens = k->shape[0], dim = k->shape[2];
  STRATA_NAIVE_CHECK(b, ExpectTensor(q, "q", {tokens, -1, dim}, Kind::kFloat));
  if ((q_norm == nullptr) != (k_norm == nullptr)) {
    return Invalid(b, "q_norm and k_norm: both or neither");
  }
  if (q_norm != nullptr) {
    STRATA_NAIVE_CHECK(b, ExpectTensor(q_norm, "q_norm", {dim}, Kind::kFloat));
    STRATA_NAIVE_CHECK(b, ExpectTensor(k_norm, "k_norm", {dim}, Kind::kFloat));
  }
  STRATA_NAIVE_CHECK(b, ExpectTensor(positions, "positions", {tokens}, Kind::kI32));
  STRATA_NAIVE_CHECK(b, ExpectTensor(inv_freq, "inv_freq", {-1}, Kind::kF32));
  if (2 * inv_freq->shape[0] > dim) return Invalid(b, "inv_freq longer than head_dim / 2");
  strata_status st = STRATA_OK;
  if (q_norm != nullptr) {
    st = RmsNorm(b, s, q, nullptr, q_norm, eps, q);
    if (st == STRATA_OK) st = RmsNorm(b, s, k, nullptr, k_norm, eps, k);
  }
  if (st == STRATA_OK) st = Rope(b, s, q, k, positions, inv_freq, mscale);
  if (st == STRATA_OK) st = KvAppend(b, s, cache, layer, k, v, slots);
  return st;
}

strata_status SiluMul(strata_backend b, strata_stream, const strata_tensor* x, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(x, "x", {-1, -1}, Kind::kFloat));
  const int64_t tokens = x->shape[0], inter = x->shape[1] / 2;
  if (x->shape[1] % 2 != 0) return Invalid(b, "x: odd inner dim");
  STRATA_NAIVE_CHECK(b, ExpectTensor(out, "out", {tokens, inter}, Kind::kFloat));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < inter; ++i) {
      const double gate = At(*x, t, i), up = At(*x, t, inter + i);
      Set(*out, t, i, gate / (1.0 + std::exp(-gate)) * up);
    }
  }
  return STRATA_OK;
}

// The composition the ABI defines: gemm into scratch (rounded to its dtype), then silu_mul.
strata_status GemmSiluMul(strata_backend b, strata_stream s, const strata_tensor* x,
                          const strata_tensor* w_gate_up, const strata_tensor* bias,
                          strata_tensor* scratch, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(x, "x", {-1, -1}, Kind::kFloat));
  const int64_t tokens = x->shape[0], hidden = x->shape[1];
  STRATA_NAIVE_CHECK(b, ExpectTensor(w_gate_up, "w_gate_up", {-1, hidden}, Kind::kFloat));
  if (w_gate_up->shape[0] % 2 != 0) return Invalid(b, "w_gate_up: odd number of rows");
  const int64_t inter = w_gate_up->shape[0] / 2;
  if (bias != nullptr) {
    STRATA_NAIVE_CHECK(b, ExpectTensor(bias, "bias", {2 * inter}, Kind::kFloat));
  }
  STRATA_NAIVE_CHECK(b, ExpectTensor(scratch, "scratch", {tokens, 2 * inter}, Kind::kFloat));
  STRATA_NAIVE_CHECK(b, ExpectTensor(out, "out", {tokens, inter}, Kind::kFloat));
  const strata_status st = Gemm(b, s, x, w_gate_up, bias, 0, scratch);
  return st == STRATA_OK ? SiluMul(b, s, scratch, out) : st;
}

strata_status GatherRows(strata_backend b, strata_stream, const strata_tensor* x,
                         const strata_tensor* rows, strata_tensor* out) {
  STRATA_NAIVE_CHECK(b, ExpectTensor(x, "x", {-1, -1}, Kind::kFloat));
  STRATA_NAIVE_CHECK(b, ExpectTensor(rows, "rows", {-1}, Kind::kI32));
  const int64_t n = rows->shape[0], hidden = x->shape[1];
  STRATA_NAIVE_CHECK(b, ExpectTensor(out, "out", {n, hidden}, Kind::kFloat));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t row = IntAt(*rows, i);
    if (row < 0 || row >= x->shape[0]) return Invalid(b, absl::StrCat("rows[", i, "] = ", row));
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < hidden; ++h) Set(*out, i, h, At(*x, IntAt(*rows, i), h));
  }
  return STRATA_OK;
}

strata_plugin_api_v1 MakeTable() {
  strata_plugin_api_v1 t{};
  t.api_version = STRATA_PLUGIN_API_VERSION;
  t.struct_size = sizeof(strata_plugin_api_v1);
  t.plugin_name = "naive";
  t.create = Create;
  t.destroy = Destroy;
  t.last_error = LastError;
  t.get_info = GetInfo;
  t.alloc = Alloc;
  t.free = Free;
  t.stream_create = StreamCreate;
  t.stream_destroy = StreamDestroy;
  t.stream_synchronize = StreamSynchronize;
  t.copy_h2d = Copy;
  t.copy_d2h = Copy;
  t.copy_d2d = Copy;
  t.embedding = Embedding;
  t.rms_norm = RmsNorm;
  t.gemm = Gemm;
  t.rope = Rope;
  t.silu_mul = SiluMul;
  t.gather_rows = GatherRows;
  t.kv_append = KvAppend;
  t.attention_prefill = AttentionPrefill;
  t.attention_decode = AttentionDecode;
  t.kv_copy_blocks = KvCopyBlocks;
  t.kv_gather = KvGather;
  t.kv_scatter = KvScatter;
  t.moe_route = MoeRoute;
  t.sample = Sample;
  t.moe_experts = MoeExperts;
  t.attention_prologue = AttentionPrologue;
  t.gemm_silu_mul = GemmSiluMul;
  t.moe_route_experts = MoeRouteExperts;
  t.host_register = HostRegister;
  t.host_unregister = HostUnregister;
  t.copy_runs = CopyRuns;
  t.mask_logits = MaskLogits;
  return t;
}

}  // namespace
}  // namespace strata::naive

namespace strata {

const strata_plugin_api_v1* NaivePluginApi() {
  static const strata_plugin_api_v1 table = naive::MakeTable();
  return &table;
}

absl::StatusOr<std::shared_ptr<Plugin>> NaivePlugin() {
  return Plugin::FromTable(NaivePluginApi(), "naive");
}

}  // namespace strata
