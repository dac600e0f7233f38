// sample: the ABI's sampling rule on the device (kernels_sample.cu: greedy rows on one block,
// the others on a cluster of 8 blocks per row), so the engine copies back N token ids instead of
// N x vocab logits. Parameter values live in device memory and are not read back: the kernel
// clamps out-of-range values (the engine validates them before they get here); the CPU plugin
// rejects them instead. mask_logits (kernels_mask.cu) runs before it for constrained rows.
#include "cuda_ops.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin_common/op_args.h"

namespace strata::cuda {

Status Sample(Stream& s, const strata_tensor* logits, const strata_sample_params* params,
              strata_tensor* tokens, strata_tensor* logprobs, strata_tensor* top_ids) {
  constexpr const char* kOp = "sample";
  plugin_common::SampleArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckSample(kStorageDtype, logits, params, tokens, logprobs, top_ids, &a));
  if (a.tokens.stride != 1) return Unsupported(kOp, "tokens must be dense");
  const bool f32 = a.logits.dtype == STRATA_DTYPE_F32;
  return CudaStatus(
      kOp,
      LaunchSample(a.logits.data, f32, a.logits.stride, a.logits.rows, a.logits.cols, params,
                   static_cast<int32_t*>(a.tokens.data),
                   a.has_logprobs ? static_cast<float*>(a.logprobs.data) : nullptr,
                   a.logprobs.stride,
                   a.has_logprobs ? static_cast<int32_t*>(a.top_ids.data) : nullptr,
                   a.top_ids.stride, s.stream),
      "kernel launch");
}

Status MaskLogits(Stream& s, strata_tensor* logits, const strata_tensor* rows,
                  const strata_tensor* masks) {
  constexpr const char* kOp = "mask_logits";
  plugin_common::MaskLogitsArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckMaskLogits(kStorageDtype, logits, rows, masks, &a));
  return CudaStatus(
      kOp,
      LaunchMaskLogits(a.logits.data, a.logits.dtype == STRATA_DTYPE_F32, a.logits.stride,
                       a.logits.rows, a.logits.cols, a.rows.Ints(), a.rows.stride,
                       static_cast<const uint32_t*>(a.masks.data), a.masks.stride, a.rows.rows,
                       s.stream),
      "kernel launch");
}

}  // namespace strata::cuda
