#pragma once
// The plugin-side helpers this plugin shares with the other in-tree plugins (plugins/common:
// Status, descriptor validation, op argument checks), named in strata::cuda, plus the
// CUDA-specific error conversions. Descriptors live on the host and are checked before anything
// is enqueued; the index arrays they point to live on the device, so their *values* are
// bounds-guarded inside the kernels instead (an out-of-range id or slot is skipped, never
// dereferenced).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "strata/plugin_common/op_args.h"
#include "strata/plugin_common/status.h"
#include "strata/plugin_common/tensor.h"

namespace strata::cuda {

using plugin_common::CacheView;
using plugin_common::Cat;
using plugin_common::InvalidArgument;
using plugin_common::Status;
using plugin_common::TensorView;
using plugin_common::Unsupported;

// The storage dtype of activations, weights and the KV pool.
inline constexpr strata_dtype kStorageDtype = STRATA_DTYPE_BF16;

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
