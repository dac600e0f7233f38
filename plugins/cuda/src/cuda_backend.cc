#include "cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace strata::cuda {
namespace {

constexpr size_t kMaxErrorBytes = 1024;

thread_local std::string detached_error;

// Reads an integer "key": N from a JSON object without a JSON library: the plugin links only
// the ABI header. Returns false when the key is absent or its value is not an integer.
bool FindIntKey(const char* json, const char* key, long* value) {
  if (json == nullptr) return false;
  const std::string quoted = Cat("\"", key, "\"");
  const char* at = std::strstr(json, quoted.c_str());
  if (at == nullptr) return false;
  at += quoted.size();
  while (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r') ++at;
  if (*at != ':') return false;
  ++at;
  char* end = nullptr;
  *value = std::strtol(at, &end, 10);
  return end != at;
}

}  // namespace

Status Stream::Create(const char* op, std::unique_ptr<Stream>* out) {
  auto s = std::make_unique<Stream>();
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(
      op, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  STRATA_PLUGIN_RETURN_IF_ERROR(CublasStatus(op, cublasCreate(&s->blas), "cublasCreate"));
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CublasStatus(op, cublasSetStream(s->blas, s->stream), "cublasSetStream"));
  *out = std::move(s);
  return Status();
}

Status Stream::Workspace(const char* op, size_t bytes, void** out) {
  if (bytes > workspace_bytes_ && capturing) {
    return Unsupported(op, "the stream's workspace would grow while a graph is recorded");
  }
  if (bytes > workspace_bytes_) {
    if (workspace_ != nullptr) {
      STRATA_PLUGIN_RETURN_IF_ERROR(
          CudaStatus(op, cudaFreeAsync(workspace_, stream), "cudaFreeAsync"));
      workspace_ = nullptr;
      workspace_bytes_ = 0;
    }
    const size_t grown = std::max(bytes, size_t{1} << 20);
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CudaStatus(op, cudaMallocAsync(&workspace_, grown, stream), "cudaMallocAsync"));
    workspace_bytes_ = grown;
  }
  *out = workspace_;
  return Status();
}

Status Stream::ReserveRunList(const char* op, size_t bytes, void** host, void** device) {
  if (capturing) return Unsupported(op, "a copy cannot be recorded in a graph");
  if (run_list_uploaded_ == nullptr) {
    STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(
        op, cudaEventCreateWithFlags(&run_list_uploaded_, cudaEventDisableTiming),
        "cudaEventCreate"));
  } else {
    // Usually long done: the upload is a few microseconds of a call enqueued earlier.
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CudaStatus(op, cudaEventSynchronize(run_list_uploaded_), "cudaEventSynchronize"));
  }
  if (bytes > run_list_bytes_) {
    if (run_list_device_ != nullptr) {
      STRATA_PLUGIN_RETURN_IF_ERROR(
          CudaStatus(op, cudaFreeAsync(run_list_device_, stream), "cudaFreeAsync"));
      run_list_device_ = nullptr;
    }
    if (run_list_host_ != nullptr) {
      STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(op, cudaFreeHost(run_list_host_), "cudaFreeHost"));
      run_list_host_ = nullptr;
    }
    run_list_bytes_ = 0;
    const size_t grown = std::max(bytes, size_t{64} << 10);
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CudaStatus(op, cudaMallocHost(&run_list_host_, grown), "cudaMallocHost"));
    STRATA_PLUGIN_RETURN_IF_ERROR(
        CudaStatus(op, cudaMallocAsync(&run_list_device_, grown, stream), "cudaMallocAsync"));
    run_list_bytes_ = grown;
  }
  *host = run_list_host_;
  *device = run_list_device_;
  return Status();
}

Status Stream::UploadRunList(const char* op, size_t bytes) {
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(
      op, cudaMemcpyAsync(run_list_device_, run_list_host_, bytes, cudaMemcpyHostToDevice, stream),
      "cudaMemcpyAsync"));
  return CudaStatus(op, cudaEventRecord(run_list_uploaded_, stream), "cudaEventRecord");
}

Status Stream::FlushPrologue(const char* op) {
  if (!deferred_prologue) return Status();
  const PrologueArgs p = *deferred_prologue;
  deferred_prologue.reset();
  return CudaStatus(op, LaunchAttentionPrologue(p, stream), "attention_prologue launch");
}

int64_t PrologueInAttentionMaxRows() {
  // Read at every call (once per layer of a step), so a test can change it.
  const char* v = std::getenv("STRATA_CUDA_PROLOGUE_IN_ATTENTION");
  if (v == nullptr) return kPrologueInAttentionMaxRows;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end != v && n >= 0 ? static_cast<int64_t>(n) : kPrologueInAttentionMaxRows;
}

Stream::~Stream() {
  if (workspace_ != nullptr && stream != nullptr) cudaFreeAsync(workspace_, stream);
  if (run_list_device_ != nullptr && stream != nullptr) cudaFreeAsync(run_list_device_, stream);
  if (run_list_uploaded_ != nullptr) cudaEventSynchronize(run_list_uploaded_);
  if (run_list_host_ != nullptr) cudaFreeHost(run_list_host_);
  if (run_list_uploaded_ != nullptr) cudaEventDestroy(run_list_uploaded_);
  if (blas != nullptr) cublasDestroy(blas);
  if (stream != nullptr) cudaStreamDestroy(stream);
  magic = 0;
}

Status CudaBackend::Create(const char* config_json, std::unique_ptr<CudaBackend>* out) {
  Status status = CreateOnDevice(config_json, out);
  if (!status.ok()) cudaGetLastError();  // a failed runtime call must not leak into the next
  return status;
}

Status CudaBackend::CreateOnDevice(const char* config_json, std::unique_ptr<CudaBackend>* out) {
  constexpr const char* kOp = "create";
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Unsupported(kOp, "no CUDA device is available",
                       err != cudaSuccess ? Cat(" (", cudaGetErrorString(err), ")") : "");
  }
  long device = 0;
  if (FindIntKey(config_json, "device", &device) && (device < 0 || device >= count)) {
    return InvalidArgument(kOp, "config \"device\": ", device, " is out of range [0, ", count, ")");
  }
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = static_cast<int>(device);
  STRATA_PLUGIN_RETURN_IF_ERROR(CudaStatus(kOp, cudaSetDevice(be->device_), "cudaSetDevice"));
  cudaDeviceProp prop;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      CudaStatus(kOp, cudaGetDeviceProperties(&prop, be->device_), "cudaGetDeviceProperties"));
  be->device_name_ = Cat(prop.name, " (device ", be->device_, ", sm_", prop.major, prop.minor, ")");
  be->total_memory_ = prop.totalGlobalMem;
  STRATA_PLUGIN_RETURN_IF_ERROR(Stream::Create(kOp, &be->default_stream_));
  *out = std::move(be);
  return Status();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (default_stream_ != nullptr) cudaStreamSynchronize(default_stream_->stream);
  for (void* ptr : ipc_opened_) cudaIpcCloseMemHandle(ptr);
  cudaGetLastError();
}

namespace {
std::mutex g_exported_mu;
std::set<std::string>* ExportedHandles() {  // guarded by g_exported_mu; never destroyed
  static auto* handles = new std::set<std::string>();
  return handles;
}
std::string HandleBytes(const cudaIpcMemHandle_t& h) {
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}
}  // namespace

void CudaBackend::NoteExported(const cudaIpcMemHandle_t& handle) {
  std::lock_guard<std::mutex> lock(g_exported_mu);
  ExportedHandles()->insert(HandleBytes(handle));
}

Status CudaBackend::IpcOpen(const char* op, const cudaIpcMemHandle_t& handle, void** out) {
  {
    std::lock_guard<std::mutex> lock(g_exported_mu);
    if (ExportedHandles()->count(HandleBytes(handle)) != 0) {
      return Unsupported(op, "this backend cannot map the exported allocation: it was exported "
                             "by this same process");
    }
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess);
  if (err == cudaErrorMemoryAllocation) return CudaStatus(op, err, "cudaIpcOpenMemHandle");
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Unsupported(op, "this backend cannot map the exported allocation (exported by this "
                       "same process, on another host, or on a device without peer access): "
                       "cudaIpcOpenMemHandle: ", cudaGetErrorName(err), " (",
                       cudaGetErrorString(err), ")");
  }
  std::lock_guard<std::mutex> lock(ipc_mu_);
  ipc_opened_.insert(ptr);
  *out = ptr;
  return Status();
}

void CudaBackend::IpcClose(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(ipc_mu_);
    if (ipc_opened_.erase(ptr) == 0) return;  // not a pointer ipc_open returned
  }
  cudaIpcCloseMemHandle(ptr);
  cudaGetLastError();
}

void CudaBackend::RecordError(std::string_view prefix, std::string_view message) noexcept {
  try {
    std::string text(prefix);
    text.append(message);
    if (text.size() > kMaxErrorBytes) text.resize(kMaxErrorBytes);
    std::lock_guard<std::mutex> lock(error_mu_);
    errors_[std::this_thread::get_id()] = std::move(text);
  } catch (...) {
    // Out of host memory while recording: the code returned still tells the caller.
  }
}

const char* CudaBackend::LastError() {
  std::lock_guard<std::mutex> lock(error_mu_);
  auto it = errors_.find(std::this_thread::get_id());
  return it == errors_.end() ? "" : it->second.c_str();
}

void CudaBackend::RecordDetachedError(std::string_view prefix, std::string_view message) noexcept {
  try {
    detached_error.assign(prefix);
    detached_error.append(message);
    if (detached_error.size() > kMaxErrorBytes) detached_error.resize(kMaxErrorBytes);
  } catch (...) {
  }
}

const char* CudaBackend::DetachedLastError() { return detached_error.c_str(); }

}  // namespace strata::cuda
