// Token masks for constrained decoding (abi.h mask_logits): one thread per logit, a warp per
// 32-bit mask word (one broadcast load), and only the masked-out entries are written (-inf as
// its bit pattern), so a row costs its mask words plus the writes of the disallowed ids.
#include <cuda_runtime.h>

#include <cstdint>

#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, T kNegInfBits>
__global__ void MaskLogitsKernel(T* logits, int64_t stride, int64_t num_rows, int64_t vocab,
                                 const int32_t* rows, int64_t rows_stride, const uint32_t* masks,
                                 int64_t mask_stride, int64_t n) {
  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int32_t row = rows[i * rows_stride];
    if (row < 0 || row >= num_rows) continue;
    T* out = logits + row * stride;
    const uint32_t* words = masks + i * mask_stride;
    for (int64_t v = blockIdx.x * int64_t{kThreads} + threadIdx.x; v < vocab;
         v += int64_t{gridDim.x} * kThreads) {
      if (((words[v >> 5] >> (v & 31)) & 1u) == 0) out[v] = kNegInfBits;
    }
  }
}

}  // namespace

cudaError_t LaunchMaskLogits(void* logits, bool f32, int64_t stride, int64_t num_rows,
                             int64_t vocab, const int32_t* rows, int64_t rows_stride,
                             const uint32_t* masks, int64_t mask_stride, int64_t n,
                             cudaStream_t stream) {
  if (n == 0 || vocab == 0) return cudaSuccess;
  const int64_t blocks_x = (vocab + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks_x < 1024 ? blocks_x : 1024),
                  static_cast<unsigned>(n < 65535 ? n : 65535));
  if (f32) {
    MaskLogitsKernel<uint32_t, 0xff800000u><<<grid, kThreads, 0, stream>>>(
        static_cast<uint32_t*>(logits), stride, num_rows, vocab, rows, rows_stride, masks,
        mask_stride, n);
  } else {
    MaskLogitsKernel<uint16_t, uint16_t{0xff80}><<<grid, kThreads, 0, stream>>>(
        static_cast<uint16_t*>(logits), stride, num_rows, vocab, rows, rows_stride, masks,
        mask_stride, n);
  }
  return cudaGetLastError();
}

}  // namespace strata::cuda
