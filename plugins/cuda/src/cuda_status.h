#pragma once
// A small status type for the CUDA plugin's internals. The plugin sees only the C ABI (no
// strata C++ library), so it carries its own: an ABI status code plus a message that the entry
// points copy into the backend's last_error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <sstream>
#include <string>
#include <utility>

#include "strata/plugin/abi.h"

namespace strata::cuda {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(strata_status code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == STRATA_OK; }
  strata_status code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  strata_status code_ = STRATA_OK;
  std::string message_;
};

// Concatenates anything streamable; only used to build error messages.
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// "<op>: <message>" with code INVALID_ARGUMENT.
template <typename... Args>
Status InvalidArgument(const char* op, const Args&... args) {
  return Status(STRATA_ERR_INVALID_ARGUMENT, Cat(op, ": ", args...));
}

template <typename... Args>
Status Unsupported(const char* op, const Args&... args) {
  return Status(STRATA_ERR_UNSUPPORTED, Cat(op, ": ", args...));
}

// A CUDA runtime failure: OUT_OF_MEMORY for allocation failures, INTERNAL otherwise.
inline Status CudaStatus(const char* op, cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status();
  const strata_status code =
      err == cudaErrorMemoryAllocation ? STRATA_ERR_OUT_OF_MEMORY : STRATA_ERR_INTERNAL;
  return Status(
      code, Cat(op, ": ", what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

inline Status CublasStatus(const char* op, cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status();
  const strata_status code =
      err == CUBLAS_STATUS_ALLOC_FAILED ? STRATA_ERR_OUT_OF_MEMORY : STRATA_ERR_INTERNAL;
  return Status(code, Cat(op, ": ", what, ": ", cublasGetStatusString(err)));
}

}  // namespace strata::cuda

#define STRATA_CUDA_RETURN_IF_ERROR(expr)            \
  do {                                               \
    ::strata::cuda::Status strata_cuda_s_ = (expr);  \
    if (!strata_cuda_s_.ok()) return strata_cuda_s_; \
  } while (0)
