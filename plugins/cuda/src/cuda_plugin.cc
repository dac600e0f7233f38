// libstrata_cuda.so: the CUDA plugin. This file holds the exported entry table (lifecycle and
// op trampolines from plugins/common), get_info, memory, streams, copies, device memory shared
// between processes and step replay; the ops live in cuda_ops_*.cc, the kernels in kernels/cuda.
//
// Every entry point catches everything: no C++ exception crosses the C ABI. Each one first
// makes the backend's device current (the host may call from any thread) and clears any stale
// CUDA error, so a launch error reported afterwards belongs to this call.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <utility>

#include "cuda_backend.h"
#include "cuda_ops.h"
#include "strata/plugin/abi.h"
#include "strata/plugin_common/entry.h"

namespace strata::cuda {
namespace {

// Runs `body` for entry `op` with the backend's device current and no stale CUDA error, so a
// launch error reported afterwards belongs to this call.
template <typename Body>
strata_status Guard(strata_backend handle, const char* op, Body&& body) noexcept {
  return plugin_common::Guard<CudaBackend>(handle, op, [&](CudaBackend& be) {
    cudaGetLastError();
    Status status = CudaStatus(op, cudaSetDevice(be.device()), "cudaSetDevice");
    if (status.ok()) status = body(be);
    // A failed runtime call must not leak into the next entry.
    if (!status.ok()) cudaGetLastError();
    return status;
  });
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
    const bool decode_attention = std::strcmp(op, "attention_decode") == 0;
    if (s->deferred_prologue && !decode_attention) {
      STRATA_PLUGIN_RETURN_IF_ERROR(s->FlushPrologue(op));
    }
    s->writes.BeginOp();
    if (!decode_attention) return body(*s);
    Status status = body(*s);
    // Attention takes a held-back prologue before it launches anything; one still held was
    // not taken (bad arguments, no sequences): it runs on its own.
    const Status flushed = s->FlushPrologue(op);
    return status.ok() ? flushed : status;
  });
}

// How plugin_common's op entries run this plugin's ops: on the resolved stream.
struct Entries {
  using Backend = CudaBackend;
  using Context = Stream;
  template <typename Body>
  static strata_status RunOp(strata_backend b, strata_stream st, const char* op,
                             Body&& body) noexcept {
    return GuardOp(b, st, op, std::forward<Body>(body));
  }
};

// ---- lifecycle --------------------------------------------------------------------------

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

strata_status CopyRunsEntry(strata_backend b, strata_stream stream, void* dst, const void* src,
                            const strata_copy_run* runs, int64_t n) noexcept {
  return GuardOp(b, stream, "copy_runs",
                 [&](Stream& s) { return CopyRuns(s, dst, src, runs, n); });
}

// ---- device memory shared between processes -------------------------------------------

static_assert(sizeof(cudaIpcMemHandle_t) == STRATA_IPC_HANDLE_BYTES);

strata_status IpcExport(strata_backend b, void* ptr,
                        uint8_t handle[STRATA_IPC_HANDLE_BYTES]) noexcept {
  constexpr const char* kOp = "ipc_export";
  return Guard(b, kOp, [&](CudaBackend&) {
    if (ptr == nullptr || handle == nullptr) return InvalidArgument(kOp, "ptr or handle is NULL");
    cudaIpcMemHandle_t h;
    const cudaError_t err = cudaIpcGetMemHandle(&h, ptr);
    if (err == cudaErrorInvalidValue) {
      return InvalidArgument(kOp, "ptr is not device memory from alloc: ", cudaGetErrorName(err));
    }
    if (err != cudaSuccess) {
      return Unsupported(kOp, "cudaIpcGetMemHandle: ", cudaGetErrorName(err), " (",
                         cudaGetErrorString(err), ")");
    }
    std::memcpy(handle, &h, sizeof(h));
    CudaBackend::NoteExported(h);
    return Status();
  });
}

strata_status IpcOpen(strata_backend b, const uint8_t handle[STRATA_IPC_HANDLE_BYTES],
                      void** out) noexcept {
  constexpr const char* kOp = "ipc_open";
  return Guard(b, kOp, [&](CudaBackend& be) {
    if (handle == nullptr || out == nullptr) return InvalidArgument(kOp, "handle or out is NULL");
    *out = nullptr;
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle, sizeof(h));
    return be.IpcOpen(kOp, h, out);
  });
}

void IpcClose(strata_backend b, void* ptr) noexcept {
  CudaBackend* be = CudaBackend::FromHandle(b);
  if (be == nullptr || ptr == nullptr) return;
  cudaSetDevice(be->device());
  be->IpcClose(ptr);
}

// ---- step replay --------------------------------------------------------------------

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

// ---- the entry table ------------------------------------------------------------------

constexpr strata_plugin_api_v1 MakeApi() {
  strata_plugin_api_v1 api = plugin_common::CommonApi<Entries>("cuda");
  api.get_info = GetInfo;
  api.alloc = Alloc;
  api.free = Free;
  api.stream_create = StreamCreate;
  api.stream_destroy = StreamDestroy;
  api.stream_synchronize = StreamSynchronize;
  api.copy_h2d = Copy<kCopyH2D, cudaMemcpyHostToDevice>;
  api.copy_d2h = Copy<kCopyD2H, cudaMemcpyDeviceToHost>;
  api.copy_d2d = Copy<kCopyD2D, cudaMemcpyDeviceToDevice>;
  api.graph_capture_begin = GraphBeginEntry;
  api.graph_capture_end = GraphEndEntry;
  api.graph_launch = GraphLaunchEntry;
  api.graph_destroy = GraphDestroyEntry;
  api.host_register = HostRegister;
  api.host_unregister = HostUnregister;
  api.ipc_export = IpcExport;
  api.ipc_open = IpcOpen;
  api.ipc_close = IpcClose;
  api.copy_runs = CopyRunsEntry;
  return api;
}

constexpr strata_plugin_api_v1 kApi = MakeApi();

}  // namespace
}  // namespace strata::cuda

extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api_v1* strata_plugin_get_api(void) {
  return &strata::cuda::kApi;
}
