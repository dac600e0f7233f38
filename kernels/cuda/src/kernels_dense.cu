// Row-wise dense kernels: gather rows (embedding, gather_rows, MoE), rms_norm, rope, silu_mul
// and the GEMM bias epilogue. Simple one-block-per-row kernels accumulating in fp32, launched
// with programmatic dependent launch (each waits for its predecessors before touching memory),
// so a decode step's chain of small kernels does not pay a full launch gap per kernel.
#include <algorithm>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float Load(const bf16* p) { return __bfloat162float(*p); }

// Grid-stride over rows: blockIdx.x strides over rows, threads over the row's elements.
unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535 * 16));
}

__global__ void GatherRowsKernel(const bf16* src, int64_t src_stride, int64_t src_rows,
                                 const int32_t* ids, int64_t n, int64_t cols, bf16* dst,
                                 int64_t dst_stride) {
  WaitForPrerequisites();
  AllowDependents();
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t id = ids[i];
    if (id < 0 || id >= src_rows) continue;
    const bf16* s = src + id * src_stride;
    bf16* d = dst + i * dst_stride;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
  }
}

// Sum of `v` over the block; every thread gets the result. `scratch` holds one float per warp.
__device__ float BlockSum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += scratch[w];
  return total;
}

// One block per (row, head): residual += x in place, then out = norm(residual or x) * weight.
// Each thread reads back only the elements it wrote, so out may alias x or residual.
__global__ void RmsNormKernel(const bf16* x, int64_t x_stride, bf16* residual, int64_t res_stride,
                              const bf16* weight, float eps, int64_t rows, int64_t heads, int64_t d,
                              bf16* out, int64_t out_stride) {
  WaitForPrerequisites();
  AllowDependents();
  __shared__ float scratch[32];
  for (int64_t item = blockIdx.x; item < rows * heads; item += gridDim.x) {
    const int64_t t = item / heads, h = item % heads;
    const bf16* xr = x + t * x_stride + h * d;
    bf16* rr = residual != nullptr ? residual + t * res_stride + h * d : nullptr;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      float v = Load(xr + i);
      if (rr != nullptr) {
        const bf16 sum = __float2bfloat16(Load(rr + i) + v);
        rr[i] = sum;
        v = __bfloat162float(sum);
      }
      sq += v * v;
    }
    const float inv = rsqrtf(BlockSum(sq, scratch) / static_cast<float>(d) + eps);
    bf16* o = out + t * out_stride + h * d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float v = rr != nullptr ? Load(rr + i) : Load(xr + i);
      o[i] = __float2bfloat16((v * inv) * Load(weight + i));
    }
  }
}

// The same norm for rows of 16-byte chunks (d % 8 == 0, 16-byte aligned rows and weight): each
// thread owns up to kChunks chunks of the row, issues all its loads (x, residual, weight) before
// it uses any, keeps the values in registers between the two passes and writes 16 bytes at a
// time. Same arithmetic as RmsNormKernel but for the order of the fp32 sum of squares. The
// scalar kernel's per-element loop put two dependent memory round trips on every element
// (its stores to residual may alias x, so the loads cannot be hoisted): ~10 us per decode row.
template <int kChunks>
__global__ void RmsNormVecKernel(const bf16* x, int64_t x_stride, bf16* residual,
                                 int64_t res_stride, const bf16* weight, float eps, int64_t rows,
                                 int64_t heads, int64_t d, bf16* out, int64_t out_stride) {
  WaitForPrerequisites();
  AllowDependents();
  __shared__ float scratch[32];
  const int64_t chunks = d / 8;
  for (int64_t item = blockIdx.x; item < rows * heads; item += gridDim.x) {
    const int64_t t = item / heads, h = item % heads;
    const bf16* xr = x + t * x_stride + h * d;
    bf16* rr = residual != nullptr ? residual + t * res_stride + h * d : nullptr;
    uint4 xv[kChunks], rv[kChunks], wv[kChunks];
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
      if (c < chunks) {
        xv[j] = *reinterpret_cast<const uint4*>(xr + c * 8);
        if (rr != nullptr) rv[j] = *reinterpret_cast<const uint4*>(rr + c * 8);
        wv[j] = *reinterpret_cast<const uint4*>(weight + c * 8);
      }
    }
    float v[kChunks][8];
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
      if (c >= chunks) continue;
      const bf16* xe = reinterpret_cast<const bf16*>(&xv[j]);
      if (rr != nullptr) {
        bf16* re = reinterpret_cast<bf16*>(&rv[j]);
#pragma unroll
        for (int e = 0; e < 8; ++e) re[e] = __float2bfloat16(Load(re + e) + Load(xe + e));
        *reinterpret_cast<uint4*>(rr + c * 8) = rv[j];
        xe = re;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[j][e] = Load(xe + e);
        sq += v[j][e] * v[j][e];
      }
    }
    const float inv = rsqrtf(BlockSum(sq, scratch) / static_cast<float>(d) + eps);
    bf16* o = out + t * out_stride + h * d;
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int64_t c = threadIdx.x + int64_t{j} * blockDim.x;
      if (c >= chunks) continue;
      const bf16* we = reinterpret_cast<const bf16*>(&wv[j]);
      uint4 ov;
      bf16* oe = reinterpret_cast<bf16*>(&ov);
#pragma unroll
      for (int e = 0; e < 8; ++e) oe[e] = __float2bfloat16((v[j][e] * inv) * Load(we + e));
      *reinterpret_cast<uint4*>(o + c * 8) = ov;
    }
  }
}

__device__ void RotatePair(bf16* head, int64_t i, int64_t r, float c, float s) {
  const float x0 = Load(head + i), x1 = Load(head + i + r);
  head[i] = __float2bfloat16(x0 * c - x1 * s);
  head[i + r] = __float2bfloat16(x1 * c + x0 * s);
}

// One thread per (row, head of q or k, rotary pair).
__global__ void RopeKernel(bf16* q, int64_t q_stride, int64_t hq, bf16* k, int64_t k_stride,
                           int64_t hk, int64_t d, const int32_t* positions, const float* inv_freq,
                           int64_t r, int64_t rows, float mscale) {
  WaitForPrerequisites();
  AllowDependents();
  const int64_t per_row = (hq + hk) * r;
  const int64_t total = rows * per_row;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / per_row, rem = idx % per_row;
    const int64_t h = rem / r, i = rem % r;
    // An fp32 product, as Hugging Face computes it (see abi.h).
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    c *= mscale;
    s *= mscale;
    bf16* head = h < hq ? q + t * q_stride + h * d : k + t * k_stride + (h - hq) * d;
    RotatePair(head, i, r, c, s);
  }
}

template <typename In>
__global__ void SiluMulKernel(const In* x, int64_t x_stride, int64_t rows, int64_t inter, bf16* out,
                              int64_t out_stride) {
  WaitForPrerequisites();
  AllowDependents();
  const int64_t total = rows * inter;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / inter, i = idx % inter;
    const In* row = x + t * x_stride;
    const float g = Load(row + i);
    out[t * out_stride + i] = __float2bfloat16(g / (1.0f + expf(-g)) * Load(row + inter + i));
  }
}

__global__ void BiasEpilogueKernel(bf16* out, int64_t out_stride, int64_t rows, int64_t n,
                                   const bf16* bias, bool zero_first) {
  WaitForPrerequisites();
  AllowDependents();
  const int64_t total = rows * n;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / n, j = idx % n;
    bf16* o = out + t * out_stride + j;
    const float base = zero_first ? 0.0f : Load(o);
    *o = __float2bfloat16(base + (bias != nullptr ? Load(bias + j) : 0.0f));
  }
}

unsigned ElementBlocks(int64_t total) {
  return static_cast<unsigned>(
      std::min<int64_t>(std::max<int64_t>((total + kThreads - 1) / kThreads, 1), 1 << 20));
}

}  // namespace

cudaError_t LaunchGatherRows(const bf16* src, int64_t src_stride, int64_t src_rows,
                             const int32_t* ids, int64_t n, int64_t cols, bf16* dst,
                             int64_t dst_stride, cudaStream_t stream) {
  if (n == 0 || cols == 0) return cudaSuccess;
  return LaunchPdl(GatherRowsKernel, RowBlocks(n), kThreads, 0, stream, src, src_stride, src_rows,
                   ids, n, cols, dst, dst_stride);
}

cudaError_t LaunchRmsNorm(const bf16* x, int64_t x_stride, bf16* residual, int64_t res_stride,
                          const bf16* weight, float eps, int64_t rows, int64_t heads, int64_t d,
                          bf16* out, int64_t out_stride, cudaStream_t stream) {
  if (rows * heads == 0 || d == 0) return cudaSuccess;
  constexpr int kMaxThreads = 512;
  const int64_t chunks = d / 8;
  if (d % 8 == 0 && chunks <= 4 * kMaxThreads && Aligned16(x) && Aligned16(weight) &&
      Aligned16(out) && x_stride % 8 == 0 && out_stride % 8 == 0 &&
      (residual == nullptr || (Aligned16(residual) && res_stride % 8 == 0))) {
    const int threads = static_cast<int>(
        std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, (chunks + 31) / 32 * 32)));
    const int64_t per_thread = (chunks + threads - 1) / threads;
    auto kernel = per_thread == 1   ? RmsNormVecKernel<1>
                  : per_thread == 2 ? RmsNormVecKernel<2>
                                    : RmsNormVecKernel<4>;
    return LaunchPdl(kernel, RowBlocks(rows * heads), threads, 0, stream, x, x_stride, residual,
                     res_stride, weight, eps, rows, heads, d, out, out_stride);
  }
  const int threads = d <= 128 ? 32 : (d <= 1024 ? 128 : 512);
  return LaunchPdl(RmsNormKernel, RowBlocks(rows * heads), threads, 0, stream, x, x_stride,
                   residual, res_stride, weight, eps, rows, heads, d, out, out_stride);
}

cudaError_t LaunchRope(bf16* q, int64_t q_stride, int64_t hq, bf16* k, int64_t k_stride, int64_t hk,
                       int64_t d, const int32_t* positions, const float* inv_freq, int64_t r,
                       int64_t rows, float mscale, cudaStream_t stream) {
  if (k == nullptr) hk = 0;
  const int64_t total = rows * (hq + hk) * r;
  if (total == 0) return cudaSuccess;
  return LaunchPdl(RopeKernel, ElementBlocks(total), kThreads, 0, stream, q, q_stride, hq, k,
                   k_stride, hk, d, positions, inv_freq, r, rows, mscale);
}

cudaError_t LaunchSiluMul(const bf16* x, int64_t x_stride, int64_t rows, int64_t inter, bf16* out,
                          int64_t out_stride, cudaStream_t stream) {
  if (rows * inter == 0) return cudaSuccess;
  return LaunchPdl(SiluMulKernel<bf16>, ElementBlocks(rows * inter), kThreads, 0, stream, x,
                   x_stride, rows, inter, out, out_stride);
}

cudaError_t LaunchBiasEpilogue(bf16* out, int64_t out_stride, int64_t rows, int64_t n,
                               const bf16* bias, bool zero_first, cudaStream_t stream) {
  if (rows * n == 0) return cudaSuccess;
  return LaunchPdl(BiasEpilogueKernel, ElementBlocks(rows * n), kThreads, 0, stream, out,
                   out_stride, rows, n, bias, zero_first);
}

}  // namespace strata::cuda
