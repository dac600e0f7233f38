// libstrata_cpu.so: the fp32 CPU reference plugin. This file holds the exported entry table,
// the backend lifecycle, memory, streams and copies; the compute ops live in cpu_ops_*.cc.
//
// Every entry point catches everything: no C++ exception crosses the C ABI. Ops run
// synchronously when called, so a stream is only a token and stream_synchronize has nothing
// to wait for.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "cpu_backend.h"
#include "cpu_ops.h"
#include "strata/plugin/abi.h"

struct strata_stream_s {
  uint32_t magic;
};

namespace strata::cpu {
namespace {

constexpr size_t kAlignment = 64;
constexpr uint32_t kStreamMagic = 0x53545243;  // "STRC"

// Records `prefix` + `message` as the last error; never throws, so it is safe in handlers.
strata_status Fail(CpuBackend* be, strata_status code, std::string_view prefix,
                   std::string_view message = {}) noexcept {
  if (be != nullptr) {
    be->RecordError(prefix, message);
  } else {
    RecordDetachedError(prefix, message);
  }
  return code;
}

// Runs `body` (returning Status) for entry `op`, converting failures and exceptions.
template <typename Body>
strata_status Guard(strata_backend handle, const char* op, Body&& body) noexcept {
  CpuBackend* be = CpuBackend::FromHandle(handle);
  if (be == nullptr) return Fail(nullptr, STRATA_ERR_INVALID_ARGUMENT, op, ": backend is NULL");
  try {
    Status status = body(*be);
    if (!status.ok()) return Fail(be, status.code(), status.message());
    return STRATA_OK;
  } catch (const std::bad_alloc&) {
    return Fail(be, STRATA_ERR_OUT_OF_MEMORY, op, ": out of host memory");
  } catch (const std::exception& e) {
    char prefix[128];
    std::snprintf(prefix, sizeof(prefix), "%s: internal error: ", op);
    return Fail(be, STRATA_ERR_INTERNAL, prefix, e.what());
  } catch (...) {
    return Fail(be, STRATA_ERR_INTERNAL, op, ": internal error");
  }
}

// ---- lifecycle --------------------------------------------------------------------------

strata_status Create(const char* config_json, strata_backend* out) noexcept {
  if (out == nullptr) return Fail(nullptr, STRATA_ERR_INVALID_ARGUMENT, "create: out is NULL");
  *out = nullptr;
  try {
    std::unique_ptr<CpuBackend> be;
    Status status = CpuBackend::Create(config_json, &be);
    if (!status.ok()) return Fail(nullptr, status.code(), status.message());
    *out = be.release()->handle();
    return STRATA_OK;
  } catch (const std::bad_alloc&) {
    return Fail(nullptr, STRATA_ERR_OUT_OF_MEMORY, "create: out of host memory");
  } catch (const std::exception& e) {
    return Fail(nullptr, STRATA_ERR_INTERNAL, "create: ", e.what());
  } catch (...) {
    return Fail(nullptr, STRATA_ERR_INTERNAL, "create: internal error");
  }
}

void Destroy(strata_backend backend) noexcept { delete CpuBackend::FromHandle(backend); }

const char* LastError(strata_backend backend) noexcept {
  CpuBackend* be = CpuBackend::FromHandle(backend);
  return be != nullptr ? be->LastError() : DetachedLastError();
}

strata_status GetInfo(strata_backend b, strata_backend_info* out) noexcept {
  return Guard(b, "get_info", [&](CpuBackend& be) {
    if (out == nullptr) return InvalidArgument("get_info", "out is NULL");
    out->name = "cpu";
    out->device_name = be.device_name().c_str();
    out->weight_dtype = STRATA_DTYPE_F32;
    out->act_dtype = STRATA_DTYPE_F32;
    out->kv_dtype = STRATA_DTYPE_F32;
    out->total_memory = TotalMemoryBytes();
    out->free_memory = AvailableMemoryBytes();
    return Status();
  });
}

// ---- memory and streams ---------------------------------------------------------------

// Large buffers (weights, the KV pool) are 2 MiB aligned and asked to be backed by huge pages:
// decode streams through gigabytes of them, and attention touches one head's rows a page apart,
// so 4 KiB pages would cost a TLB miss every few rows.
void* AllocateAligned(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t align = bytes >= 2 * kHugePage ? kHugePage : kAlignment;
  if (bytes > SIZE_MAX - align) return nullptr;
  // aligned_alloc wants a multiple of the alignment; 0 bytes still yields a unique pointer.
  const size_t rounded = bytes == 0 ? align : (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr && align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

strata_status Alloc(strata_backend b, size_t bytes, void** out) noexcept {
  return Guard(b, "alloc", [&](CpuBackend&) {
    if (out == nullptr) return InvalidArgument("alloc", "out is NULL");
    *out = AllocateAligned(bytes);
    if (*out == nullptr) {
      return Status(STRATA_ERR_OUT_OF_MEMORY, Cat("alloc: cannot allocate ", bytes, " bytes"));
    }
    return Status();
  });
}

void Free(strata_backend, void* ptr) noexcept { std::free(ptr); }

strata_status StreamCreate(strata_backend b, strata_stream* out) noexcept {
  return Guard(b, "stream_create", [&](CpuBackend&) {
    if (out == nullptr) return InvalidArgument("stream_create", "out is NULL");
    *out = new strata_stream_s{kStreamMagic};
    return Status();
  });
}

void StreamDestroy(strata_backend, strata_stream stream) noexcept { delete stream; }

strata_status StreamSynchronize(strata_backend b, strata_stream stream) noexcept {
  return Guard(b, "stream_synchronize", [&](CpuBackend&) {
    if (stream != nullptr && stream->magic != kStreamMagic) {
      return InvalidArgument("stream_synchronize", "not a stream of this plugin");
    }
    return Status();  // ops complete before they return
  });
}

template <const char* kOp>
strata_status Copy(strata_backend b, strata_stream, void* dst, const void* src,
                   size_t bytes) noexcept {
  return Guard(b, kOp, [&](CpuBackend& be) {
    if (bytes == 0) return Status();
    if (dst == nullptr || src == nullptr) return InvalidArgument(kOp, "dst or src is NULL");
    const char* d = static_cast<const char*>(dst);
    const char* s = static_cast<const char*>(src);
    if (d < s + bytes && s < d + bytes) {
      std::memmove(dst, src, bytes);
    } else {
      ParallelCopy(be, dst, src, bytes);
    }
    return Status();
  });
}

constexpr char kCopyH2D[] = "copy_h2d";
constexpr char kCopyD2H[] = "copy_d2h";
constexpr char kCopyD2D[] = "copy_d2d";

// ---- ops ------------------------------------------------------------------------------

strata_status EmbeddingEntry(strata_backend b, strata_stream, const strata_tensor* table,
                             const strata_tensor* ids, strata_tensor* out) noexcept {
  return Guard(b, "embedding", [&](CpuBackend& be) { return Embedding(be, table, ids, out); });
}

strata_status RmsNormEntry(strata_backend b, strata_stream, const strata_tensor* x,
                           strata_tensor* residual, const strata_tensor* weight, float eps,
                           strata_tensor* out) noexcept {
  return Guard(b, "rms_norm",
               [&](CpuBackend& be) { return RmsNorm(be, x, residual, weight, eps, out); });
}

strata_status GemmEntry(strata_backend b, strata_stream, const strata_tensor* x,
                        const strata_tensor* w, const strata_tensor* bias, int32_t accumulate,
                        strata_tensor* out) noexcept {
  return Guard(b, "gemm", [&](CpuBackend& be) { return Gemm(be, x, w, bias, accumulate, out); });
}

strata_status RopeEntry(strata_backend b, strata_stream, strata_tensor* q, strata_tensor* k,
                        const strata_tensor* positions, const strata_tensor* inv_freq,
                        float mscale) noexcept {
  return Guard(b, "rope",
               [&](CpuBackend& be) { return Rope(be, q, k, positions, inv_freq, mscale); });
}

strata_status SiluMulEntry(strata_backend b, strata_stream, const strata_tensor* x,
                           strata_tensor* out) noexcept {
  return Guard(b, "silu_mul", [&](CpuBackend& be) { return SiluMul(be, x, out); });
}

strata_status GatherRowsEntry(strata_backend b, strata_stream, const strata_tensor* x,
                              const strata_tensor* rows, strata_tensor* out) noexcept {
  return Guard(b, "gather_rows", [&](CpuBackend& be) { return GatherRows(be, x, rows, out); });
}

strata_status KvAppendEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                            int32_t layer, const strata_tensor* k, const strata_tensor* v,
                            const strata_tensor* slots) noexcept {
  return Guard(b, "kv_append",
               [&](CpuBackend& be) { return KvAppend(be, cache, layer, k, v, slots); });
}

strata_status AttentionPrologueEntry(strata_backend b, strata_stream, strata_tensor* q,
                                     strata_tensor* k, const strata_tensor* v,
                                     const strata_tensor* q_norm, const strata_tensor* k_norm,
                                     float eps, const strata_tensor* positions,
                                     const strata_tensor* inv_freq, float mscale,
                                     const strata_kv_cache* cache, int32_t layer,
                                     const strata_tensor* slots) noexcept {
  return Guard(b, "attention_prologue", [&](CpuBackend& be) {
    return AttentionPrologue(be, q, k, v, q_norm, k_norm, eps, positions, inv_freq, mscale, cache,
                             layer, slots);
  });
}

strata_status GemmSiluMulEntry(strata_backend b, strata_stream, const strata_tensor* x,
                               const strata_tensor* w_gate_up, const strata_tensor* bias,
                               strata_tensor* scratch, strata_tensor* out) noexcept {
  return Guard(b, "gemm_silu_mul",
               [&](CpuBackend& be) { return GemmSiluMul(be, x, w_gate_up, bias, scratch, out); });
}

strata_status AttentionPrefillEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                                    const strata_attention_batch* batch,
                                    const strata_attention_params* params, const strata_tensor* q,
                                    strata_tensor* out) noexcept {
  return Guard(b, "attention_prefill", [&](CpuBackend& be) {
    return Attention(be, /*decode=*/false, cache, batch, params, q, out);
  });
}

strata_status AttentionDecodeEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                                   const strata_attention_batch* batch,
                                   const strata_attention_params* params, const strata_tensor* q,
                                   strata_tensor* out) noexcept {
  return Guard(b, "attention_decode", [&](CpuBackend& be) {
    return Attention(be, /*decode=*/true, cache, batch, params, q, out);
  });
}

strata_status KvCopyBlocksEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                                const strata_tensor* src, const strata_tensor* dst) noexcept {
  return Guard(b, "kv_copy_blocks",
               [&](CpuBackend& be) { return KvCopyBlocks(be, cache, src, dst); });
}

strata_status KvGatherEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                            const strata_tensor* blocks, void* dst) noexcept {
  return Guard(b, "kv_gather", [&](CpuBackend& be) { return KvGather(be, cache, blocks, dst); });
}

strata_status KvScatterEntry(strata_backend b, strata_stream, const strata_kv_cache* cache,
                             const strata_tensor* blocks, const void* src) noexcept {
  return Guard(b, "kv_scatter", [&](CpuBackend& be) { return KvScatter(be, cache, blocks, src); });
}

strata_status MoeRouteEntry(strata_backend b, strata_stream, const strata_tensor* router_logits,
                            int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                            strata_tensor* topk_ids) noexcept {
  return Guard(b, "moe_route", [&](CpuBackend& be) {
    return MoeRoute(be, router_logits, top_k, renormalize, topk_weights, topk_ids);
  });
}

strata_status MoeExpertsEntry(strata_backend b, strata_stream, const strata_tensor* x,
                              const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                              const strata_tensor* w_gate_up, const strata_tensor* w_down,
                              strata_tensor* out) noexcept {
  return Guard(b, "moe_experts", [&](CpuBackend& be) {
    return MoeExperts(be, x, topk_weights, topk_ids, w_gate_up, w_down, out);
  });
}

strata_status MoeRouteExpertsEntry(strata_backend b, strata_stream, const strata_tensor* x,
                                   const strata_tensor* router_logits, int32_t top_k,
                                   int32_t renormalize, strata_tensor* topk_weights,
                                   strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                                   const strata_tensor* w_down, strata_tensor* out) noexcept {
  return Guard(b, "moe_route_experts", [&](CpuBackend& be) {
    return MoeRouteExperts(be, x, router_logits, top_k, renormalize, topk_weights, topk_ids,
                           w_gate_up, w_down, out);
  });
}

strata_status SampleEntry(strata_backend b, strata_stream, const strata_tensor* logits,
                          const strata_sample_params* params, strata_tensor* tokens,
                          strata_tensor* logprobs, strata_tensor* top_ids) noexcept {
  return Guard(b, "sample", [&](CpuBackend& be) {
    return Sample(be, logits, params, tokens, logprobs, top_ids);
  });
}

const strata_plugin_api_v1 kApi = {
    .api_version = STRATA_PLUGIN_API_VERSION,
    .struct_size = sizeof(strata_plugin_api_v1),
    .plugin_name = "cpu",
    .create = Create,
    .destroy = Destroy,
    .last_error = LastError,
    .get_info = GetInfo,
    .alloc = Alloc,
    .free = Free,
    .stream_create = StreamCreate,
    .stream_destroy = StreamDestroy,
    .stream_synchronize = StreamSynchronize,
    .copy_h2d = Copy<kCopyH2D>,
    .copy_d2h = Copy<kCopyD2H>,
    .copy_d2d = Copy<kCopyD2D>,
    .embedding = EmbeddingEntry,
    .rms_norm = RmsNormEntry,
    .gemm = GemmEntry,
    .rope = RopeEntry,
    .silu_mul = SiluMulEntry,
    .gather_rows = GatherRowsEntry,
    .kv_append = KvAppendEntry,
    .attention_prefill = AttentionPrefillEntry,
    .attention_decode = AttentionDecodeEntry,
    .kv_copy_blocks = KvCopyBlocksEntry,
    .kv_gather = KvGatherEntry,
    .kv_scatter = KvScatterEntry,
    .moe_route = MoeRouteEntry,
    .moe_experts = MoeExpertsEntry,
    .sample = SampleEntry,
    .attention_prologue = AttentionPrologueEntry,
    .gemm_silu_mul = GemmSiluMulEntry,
    .moe_route_experts = MoeRouteExpertsEntry,
};

}  // namespace
}  // namespace strata::cpu

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
  return &strata::cpu::kApi;
}
