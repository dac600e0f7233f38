#pragma once
// The CUDA backend behind the opaque strata_backend handle (one device, its default stream,
// the last_error bookkeeping the ABI asks for) and the stream behind strata_stream (a CUDA
// stream plus the cuBLAS handle bound to it, so distinct streams on distinct threads never
// share a cuBLAS handle).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "cuda_common.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin/abi.h"
#include "write_history.h"

namespace strata::cuda {

struct Stream {
  static constexpr uint32_t kMagic = 0x53545247;  // "STRG"
  uint32_t magic = kMagic;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;

  // Scratch private to this stream (e.g. the split-KV partials of decode attention). Grows
  // stream-ordered (cudaFreeAsync + cudaMallocAsync) and never shrinks, so a steady decode loop
  // allocates nothing. The returned pointer is valid for work enqueued on this stream until
  // the next Workspace call that grows it.
  Status Workspace(const char* op, size_t bytes, void** out);
  // The current workspace (a recorded graph is replayable while it is unchanged).
  void* workspace() const { return workspace_; }
  // Between graph_capture_begin and graph_capture_end: Workspace may not grow (a recorded
  // free of the old buffer would run again on every replay), it fails instead.
  bool capturing = false;

  // What the last ops enqueued on this stream wrote (write_history.h): GuardOp calls
  // writes.BeginOp() before every entry; ops narrow it with writes.Wrote(...).
  WriteHistory writes;

  // attention_prologue's launch, held back for the decode attention that follows it, which
  // then runs the prologue inside its own kernel (DecodeAttentionRunsPrologue). GuardOp
  // launches it on its own before any other entry of this stream, so the stream's order of
  // work is as enqueued (only for batches up to PrologueInAttentionMaxRows()).
  std::optional<PrologueArgs> deferred_prologue;
  // Launches a held-back prologue now, if any (an error names `op`, the entry running).
  Status FlushPrologue(const char* op);

  // copy_runs' run list (cuda_ops_copy.cc), per stream: ReserveRunList returns a page-locked
  // host buffer of at least `bytes`, free to write (the previous upload has read it), and the
  // device buffer it goes to, both grown as needed and never shrunk; UploadRunList enqueues the
  // copy of its first `bytes`. The device buffer stays valid for work enqueued on this stream
  // until the next ReserveRunList that grows it.
  Status ReserveRunList(const char* op, size_t bytes, void** host, void** device);
  Status UploadRunList(const char* op, size_t bytes);

  // Creates a non-blocking stream and its cuBLAS handle on the current device.
  static Status Create(const char* op, std::unique_ptr<Stream>* out);
  ~Stream();

  static Stream* FromHandle(strata_stream handle) { return reinterpret_cast<Stream*>(handle); }
  strata_stream handle() { return reinterpret_cast<strata_stream>(this); }

 private:
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* run_list_host_ = nullptr;  // cudaMallocHost
  void* run_list_device_ = nullptr;
  size_t run_list_bytes_ = 0;
  cudaEvent_t run_list_uploaded_ = nullptr;  // recorded after each upload
};

// The largest batch (rows) whose attention_prologue is held back for the decode attention
// after it. Measured on the H200 (plugins/cuda/NOTES.md, "The prologue inside decode
// attention"): at batches 1 and 2 the served step gains; at 8-16 it is level or loses, and at
// 64 it loses (every CTA puts the prologue's loads before its first tile, where the separate
// kernel runs them across the whole GPU at once). STRATA_CUDA_PROLOGUE_IN_ATTENTION=N overrides it (0:
// never), for measurements.
inline constexpr int64_t kPrologueInAttentionMaxRows = 2;
int64_t PrologueInAttentionMaxRows();

class CudaBackend {
 public:
  // Parses `config_json` (may be NULL): only "device": N is read, other keys are ignored.
  // UNSUPPORTED when the machine has no CUDA device.
  static Status Create(const char* config_json, std::unique_ptr<CudaBackend>* out);
  ~CudaBackend();

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  static CudaBackend* FromHandle(strata_backend handle) {
    return reinterpret_cast<CudaBackend*>(handle);
  }
  strata_backend handle() { return reinterpret_cast<strata_backend>(this); }

  int device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  uint64_t total_memory() const { return total_memory_; }
  // The stream an op runs on: `handle`, or the backend's own stream when it is NULL.
  Stream* Resolve(strata_stream handle) {
    return handle != nullptr ? Stream::FromHandle(handle) : default_stream_.get();
  }

  // Records prefix + message (truncated to 1 KiB) for the calling thread, without throwing.
  void RecordError(std::string_view prefix, std::string_view message = {}) noexcept;
  // ipc_open / ipc_close: the allocations this backend mapped from other processes; the
  // backend's destruction closes those still open.
  Status IpcOpen(const char* op, const cudaIpcMemHandle_t& handle, void** out);
  // Remembers a handle this process exported: CUDA maps no handle in the process that exported
  // it, so IpcOpen refuses one of these without asking CUDA (which would report the failed
  // call as an API error, e.g. to compute-sanitizer). Process-wide, as that rule is.
  static void NoteExported(const cudaIpcMemHandle_t& handle);
  void IpcClose(void* ptr);

  // The calling thread's last message on this backend ("" if none).
  const char* LastError();
  // Error bookkeeping for calls that have no backend (create, or a NULL handle).
  static void RecordDetachedError(std::string_view prefix,
                                  std::string_view message = {}) noexcept;
  static const char* DetachedLastError();

 private:
  CudaBackend() = default;
  static Status CreateOnDevice(const char* config_json, std::unique_ptr<CudaBackend>* out);

  int device_ = 0;
  std::string device_name_;
  uint64_t total_memory_ = 0;
  std::unique_ptr<Stream> default_stream_;
  std::mutex error_mu_;
  std::unordered_map<std::thread::id, std::string> errors_;  // guarded by error_mu_
  std::mutex ipc_mu_;
  std::unordered_set<void*> ipc_opened_;  // guarded by ipc_mu_
};

}  // namespace strata::cuda
