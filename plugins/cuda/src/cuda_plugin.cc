// libstrata_cuda.so: the CUDA plugin. This file holds the exported entry table, the backend
// lifecycle, memory, streams and copies; the ops live in cuda_ops_*.cc, the kernels in *.cu.
//
// Every entry point catches everything: no C++ exception crosses the C ABI. Each one first
// makes the backend's device current (the host may call from any thread) and clears any stale
// CUDA error, so a launch error reported afterwards belongs to this call.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include "cuda_backend.h"
#include "cuda_ops.h"
#include "strata/plugin/abi.h"

namespace strata::cuda {
namespace {

strata_status Fail(CudaBackend* be, strata_status code, std::string_view prefix,
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
  CudaBackend* be = CudaBackend::FromHandle(handle);
  if (be == nullptr) return Fail(nullptr, STRATA_ERR_INVALID_ARGUMENT, op, ": backend is NULL");
  try {
    cudaGetLastError();
    Status status = CudaStatus(op, cudaSetDevice(be->device()), "cudaSetDevice");
    if (status.ok()) status = body(*be);
    if (!status.ok()) {
      cudaGetLastError();  // a failed runtime call must not leak into the next entry
      return Fail(be, status.code(), status.message());
    }
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

// Guard for ops: also resolves and checks the stream.
template <typename Body>
strata_status GuardOp(strata_backend handle, strata_stream stream, const char* op,
                      Body&& body) noexcept {
  return Guard(handle, op, [&](CudaBackend& be) {
    Stream* s = be.Resolve(stream);
    if (s == nullptr || s->magic != Stream::kMagic) {
      return InvalidArgument(op, "not a stream of this plugin");
    }
    // A held-back prologue goes first, unless this is the decode attention that may run it.
    if (s->deferred_prologue && std::strcmp(op, "attention_decode") != 0) {
      STRATA_PLUGIN_RETURN_IF_ERROR(s->FlushPrologue(op));
    }
    s->writes.BeginOp();
    return body(*s);
  });
}

// ---- lifecycle --------------------------------------------------------------------------

strata_status Create(const char* config_json, strata_backend* out) noexcept {
  if (out == nullptr) return Fail(nullptr, STRATA_ERR_INVALID_ARGUMENT, "create: out is NULL");
  *out = nullptr;
  try {
    std::unique_ptr<CudaBackend> be;
    Status status = CudaBackend::Create(config_json, &be);
    if (!status.ok()) {
      cudaGetLastError();
      return Fail(nullptr, status.code(), status.message());
    }
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

void Destroy(strata_backend backend) noexcept { delete CudaBackend::FromHandle(backend); }

const char* LastError(strata_backend backend) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(backend);
  return be != nullptr ? be->LastError() : DetachedLastError();
}

strata_status GetInfo(strata_backend b, strata_backend_info* out) noexcept {
  return Guard(b, "get_info", [&](CudaBackend& be) {
    if (out == nullptr) return InvalidArgument("get_info", "out is NULL");
    size_t free_bytes = 0, total_bytes = 0;
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CudaStatus("get_info", cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo"));
    out->name = "cuda";
    out->device_name = be.device_name().c_str();
    out->weight_dtype = STRATA_DTYPE_BF16;
    out->act_dtype = STRATA_DTYPE_BF16;
    out->kv_dtype = STRATA_DTYPE_BF16;
    out->total_memory = total_bytes;
    out->free_memory = free_bytes;
    return Status();
  });
}

// ---- memory and streams ---------------------------------------------------------------

strata_status Alloc(strata_backend b, size_t bytes, void** out) noexcept {
  return Guard(b, "alloc", [&](CudaBackend&) {
    if (out == nullptr) return InvalidArgument("alloc", "out is NULL");
    *out = nullptr;
    // 0 bytes still yields a unique pointer, as from the CPU plugin.
    const cudaError_t err = cudaMalloc(out, bytes == 0 ? 256 : bytes);
    if (err != cudaSuccess) {
      *out = nullptr;
      return Status(STRATA_ERR_OUT_OF_MEMORY,
                    Cat("alloc: cannot allocate ", bytes, " bytes: ", cudaGetErrorString(err)));
    }
    return Status();
  });
}

void Free(strata_backend b, void* ptr) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(b);
  if (be == nullptr || ptr == nullptr) return;
  cudaSetDevice(be->device());
  cudaFree(ptr);
  cudaGetLastError();
}

strata_status HostRegister(strata_backend b, void* ptr, size_t bytes) noexcept {
  return Guard(b, "host_register", [&](CudaBackend&) {
    if (ptr == nullptr || bytes == 0) {
      return InvalidArgument("host_register", "ptr is NULL or bytes is 0");
    }
    return CudaStatus("host_register", cudaHostRegister(ptr, bytes, cudaHostRegisterDefault),
                      "cudaHostRegister");
  });
}

void HostUnregister(strata_backend b, void* ptr) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(b);
  if (be == nullptr || ptr == nullptr) return;
  cudaSetDevice(be->device());
  cudaHostUnregister(ptr);
  cudaGetLastError();
}

strata_status StreamCreate(strata_backend b, strata_stream* out) noexcept {
  return Guard(b, "stream_create", [&](CudaBackend&) {
    if (out == nullptr) return InvalidArgument("stream_create", "out is NULL");
    std::unique_ptr<Stream> s;
    STRATA_PLUGIN_RETURN_IF_ERROR(Stream::Create("stream_create", &s));
    *out = s.release()->handle();
    return Status();
  });
}

void StreamDestroy(strata_backend b, strata_stream stream) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(b);
  Stream* s = Stream::FromHandle(stream);
  if (s == nullptr || s->magic != Stream::kMagic) return;
  if (be != nullptr) cudaSetDevice(be->device());
  (void)s->FlushPrologue("stream_destroy");
  cudaStreamSynchronize(s->stream);
  delete s;
  cudaGetLastError();
}

strata_status StreamSynchronize(strata_backend b, strata_stream stream) noexcept {
  return GuardOp(b, stream, "stream_synchronize", [&](Stream& s) {
    return CudaStatus("stream_synchronize", cudaStreamSynchronize(s.stream),
                      "cudaStreamSynchronize");
  });
}

template <const char* kOp, cudaMemcpyKind kKind>
strata_status Copy(strata_backend b, strata_stream stream, void* dst, const void* src,
                   size_t bytes) noexcept {
  return GuardOp(b, stream, kOp, [&](Stream& s) {
    if (bytes == 0) return Status();
    if (dst == nullptr || src == nullptr) return InvalidArgument(kOp, "dst or src is NULL");
    return CudaStatus(kOp, cudaMemcpyAsync(dst, src, bytes, kKind, s.stream), "cudaMemcpyAsync");
  });
}

constexpr char kCopyH2D[] = "copy_h2d";
constexpr char kCopyD2H[] = "copy_d2h";
constexpr char kCopyD2D[] = "copy_d2d";

// ---- ops ------------------------------------------------------------------------------

strata_status EmbeddingEntry(strata_backend b, strata_stream st, const strata_tensor* table,
                             const strata_tensor* ids, strata_tensor* out) noexcept {
  return GuardOp(b, st, "embedding", [&](Stream& s) { return Embedding(s, table, ids, out); });
}

strata_status RmsNormEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                           strata_tensor* residual, const strata_tensor* weight, float eps,
                           strata_tensor* out) noexcept {
  return GuardOp(b, st, "rms_norm",
                 [&](Stream& s) { return RmsNorm(s, x, residual, weight, eps, out); });
}

strata_status GemmEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                        const strata_tensor* w, const strata_tensor* bias, int32_t accumulate,
                        strata_tensor* out) noexcept {
  return GuardOp(b, st, "gemm", [&](Stream& s) { return Gemm(s, x, w, bias, accumulate, out); });
}

strata_status RopeEntry(strata_backend b, strata_stream st, strata_tensor* q, strata_tensor* k,
                        const strata_tensor* positions, const strata_tensor* inv_freq,
                        float mscale) noexcept {
  return GuardOp(b, st, "rope",
                 [&](Stream& s) { return Rope(s, q, k, positions, inv_freq, mscale); });
}

strata_status SiluMulEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                           strata_tensor* out) noexcept {
  return GuardOp(b, st, "silu_mul", [&](Stream& s) { return SiluMul(s, x, out); });
}

strata_status GatherRowsEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                              const strata_tensor* rows, strata_tensor* out) noexcept {
  return GuardOp(b, st, "gather_rows", [&](Stream& s) { return GatherRows(s, x, rows, out); });
}

strata_status KvAppendEntry(strata_backend b, strata_stream st, const strata_kv_cache* cache,
                            int32_t layer, const strata_tensor* k, const strata_tensor* v,
                            const strata_tensor* slots) noexcept {
  return GuardOp(b, st, "kv_append",
                 [&](Stream& s) { return KvAppend(s, cache, layer, k, v, slots); });
}

strata_status AttentionPrologueEntry(strata_backend b, strata_stream st, strata_tensor* q,
                                     strata_tensor* k, const strata_tensor* v,
                                     const strata_tensor* q_norm, const strata_tensor* k_norm,
                                     float eps, const strata_tensor* positions,
                                     const strata_tensor* inv_freq, float mscale,
                                     const strata_kv_cache* cache, int32_t layer,
                                     const strata_tensor* slots) noexcept {
  return GuardOp(b, st, "attention_prologue", [&](Stream& s) {
    return AttentionPrologue(s, q, k, v, q_norm, k_norm, eps, positions, inv_freq, mscale, cache,
                             layer, slots);
  });
}

strata_status AttentionPrefillEntry(strata_backend b, strata_stream st,
                                    const strata_kv_cache* cache,
                                    const strata_attention_batch* batch,
                                    const strata_attention_params* params, const strata_tensor* q,
                                    strata_tensor* out) noexcept {
  return GuardOp(b, st, "attention_prefill", [&](Stream& s) {
    return Attention(s, /*decode=*/false, cache, batch, params, q, out);
  });
}

strata_status AttentionDecodeEntry(strata_backend b, strata_stream st, const strata_kv_cache* cache,
                                   const strata_attention_batch* batch,
                                   const strata_attention_params* params, const strata_tensor* q,
                                   strata_tensor* out) noexcept {
  return GuardOp(b, st, "attention_decode", [&](Stream& s) {
    Status status = Attention(s, /*decode=*/true, cache, batch, params, q, out);
    // Attention takes a held-back prologue before it launches anything; one still held was
    // not taken (bad arguments, no sequences): it runs on its own.
    const Status flushed = s.FlushPrologue("attention_decode");
    return status.ok() ? flushed : status;
  });
}

strata_status KvCopyBlocksEntry(strata_backend b, strata_stream st, const strata_kv_cache* cache,
                                const strata_tensor* src, const strata_tensor* dst) noexcept {
  return GuardOp(b, st, "kv_copy_blocks",
                 [&](Stream& s) { return KvCopyBlocks(s, cache, src, dst); });
}

strata_status KvGatherEntry(strata_backend b, strata_stream st, const strata_kv_cache* cache,
                            const strata_tensor* blocks, void* dst) noexcept {
  return GuardOp(b, st, "kv_gather", [&](Stream& s) { return KvGather(s, cache, blocks, dst); });
}

strata_status KvScatterEntry(strata_backend b, strata_stream st, const strata_kv_cache* cache,
                             const strata_tensor* blocks, const void* src) noexcept {
  return GuardOp(b, st, "kv_scatter", [&](Stream& s) { return KvScatter(s, cache, blocks, src); });
}

strata_status MoeRouteEntry(strata_backend b, strata_stream st, const strata_tensor* logits,
                            int32_t top_k, int32_t renormalize, strata_tensor* topk_weights,
                            strata_tensor* topk_ids) noexcept {
  return GuardOp(b, st, "moe_route", [&](Stream& s) {
    return MoeRoute(s, logits, top_k, renormalize, topk_weights, topk_ids);
  });
}

strata_status SampleEntry(strata_backend b, strata_stream st, const strata_tensor* logits,
                          const strata_sample_params* params, strata_tensor* tokens,
                          strata_tensor* logprobs, strata_tensor* top_ids) noexcept {
  return GuardOp(b, st, "sample",
                 [&](Stream& s) { return Sample(s, logits, params, tokens, logprobs, top_ids); });
}

strata_status GraphBeginEntry(strata_backend b, strata_stream st) noexcept {
  return GuardOp(b, st, "graph_capture_begin", [&](Stream& s) { return GraphBegin(s); });
}

strata_status GraphEndEntry(strata_backend b, strata_stream st, strata_graph* out) noexcept {
  return GuardOp(b, st, "graph_capture_end", [&](Stream& s) { return GraphEnd(s, out); });
}

strata_status GraphLaunchEntry(strata_backend b, strata_stream st, strata_graph g) noexcept {
  return GuardOp(b, st, "graph_launch", [&](Stream& s) { return GraphLaunch(s, g); });
}

void GraphDestroyEntry(strata_backend b, strata_graph g) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(b);
  if (be != nullptr) cudaSetDevice(be->device());
  GraphDestroy(g);
}

strata_status GemmSiluMulEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                               const strata_tensor* w_gate_up, const strata_tensor* bias,
                               strata_tensor* scratch, strata_tensor* out) noexcept {
  return GuardOp(b, st, "gemm_silu_mul",
                 [&](Stream& s) { return GemmSiluMul(s, x, w_gate_up, bias, scratch, out); });
}

strata_status MoeExpertsEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                              const strata_tensor* topk_weights, const strata_tensor* topk_ids,
                              const strata_tensor* w_gate_up, const strata_tensor* w_down,
                              strata_tensor* out) noexcept {
  return GuardOp(b, st, "moe_experts", [&](Stream& s) {
    return MoeExperts(s, x, topk_weights, topk_ids, w_gate_up, w_down, out);
  });
}

strata_status MoeRouteExpertsEntry(strata_backend b, strata_stream st, const strata_tensor* x,
                                   const strata_tensor* router_logits, int32_t top_k,
                                   int32_t renormalize, strata_tensor* topk_weights,
                                   strata_tensor* topk_ids, const strata_tensor* w_gate_up,
                                   const strata_tensor* w_down, strata_tensor* out) noexcept {
  return GuardOp(b, st, "moe_route_experts", [&](Stream& s) {
    return MoeRouteExperts(s, x, router_logits, top_k, renormalize, topk_weights, topk_ids,
                           w_gate_up, w_down, out);
  });
}

const strata_plugin_api_v1 kApi = {
    .api_version = STRATA_PLUGIN_API_VERSION,
    .struct_size = sizeof(strata_plugin_api_v1),
    .plugin_name = "cuda",
    .create = Create,
    .destroy = Destroy,
    .last_error = LastError,
    .get_info = GetInfo,
    .alloc = Alloc,
    .free = Free,
    .stream_create = StreamCreate,
    .stream_destroy = StreamDestroy,
    .stream_synchronize = StreamSynchronize,
    .copy_h2d = Copy<kCopyH2D, cudaMemcpyHostToDevice>,
    .copy_d2h = Copy<kCopyD2H, cudaMemcpyDeviceToHost>,
    .copy_d2d = Copy<kCopyD2D, cudaMemcpyDeviceToDevice>,
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
    .graph_capture_begin = GraphBeginEntry,
    .graph_capture_end = GraphEndEntry,
    .graph_launch = GraphLaunchEntry,
    .graph_destroy = GraphDestroyEntry,
    .attention_prologue = AttentionPrologueEntry,
    .host_register = HostRegister,
    .host_unregister = HostUnregister,
    .gemm_silu_mul = GemmSiluMulEntry,
    .moe_route_experts = MoeRouteExpertsEntry,
};

}  // namespace
}  // namespace strata::cuda

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
  return &strata::cuda::kApi;
}
