// attention_prologue in one kernel: per (token, head) one warp, the head's D values in
// registers (lane l holds elements l + 32 i): q/k RMSNorm, rotary embedding, and the k and v
// rows written to the KV pool. The arithmetic is that of the separate kernels (RmsNormKernel,
// RopeKernel, KvAppendKernel) in the same order, with the same roundings to bf16 between the
// steps, so the fused and the unfused paths agree bit for bit. Served: head_dim 64 or 128 and
// a rotary half that is a multiple of 32 (each rotated pair then sits in one lane); the op
// falls back to the separate kernels otherwise.
#include <algorithm>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"
#include "prologue_head.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerCta = kThreads / 32;

template <int kPerLane>
__global__ void __launch_bounds__(kThreads) AttentionPrologueKernel(PrologueArgs a) {
  WaitForPrerequisites();  // q, k, v (the QKV GEMM), and earlier readers of the pool
  AllowDependents();
  constexpr int d = 32 * kPerLane;
  const int lane = threadIdx.x & 31;
  const int heads = a.hq + 2 * a.hk;
  const int64_t units = a.rows * heads;
  const int64_t plane = a.dims.block_size * a.dims.num_kv_heads * d;
  for (int64_t u = blockIdx.x * int64_t{kWarpsPerCta} + threadIdx.x / 32; u < units;
       u += int64_t{gridDim.x} * kWarpsPerCta) {
    const int64_t t = u / heads;
    const int h = static_cast<int>(u - t * heads);
    bf16* kv_row = PoolRow(a, a.slots[t]);
    if (h >= a.hq + a.hk) {  // a v head: copied to the pool's V plane
      const int hv = h - a.hq - a.hk;
      if (kv_row == nullptr) continue;
      const bf16* src = a.v + t * a.v_stride + hv * d;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        kv_row[plane + hv * d + lane + 32 * i] = src[lane + 32 * i];
      continue;
    }
    const bool is_q = h < a.hq;
    const int hh = is_q ? h : h - a.hq;
    bf16* head = is_q ? a.q + t * a.q_stride + hh * d : a.k + t * a.k_stride + hh * d;
    float x[kPerLane];
    LoadHead(head, x, lane);
    NormRopeHead(x, is_q ? a.q_norm : a.k_norm, a.eps, static_cast<float>(a.positions[t]),
                 a.inv_freq, a.r, a.mscale, lane);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const bf16 y = __float2bfloat16(x[i]);
      head[lane + 32 * i] = y;
      if (!is_q && kv_row != nullptr) kv_row[hh * d + lane + 32 * i] = y;
    }
  }
}

}  // namespace

bool AttentionPrologueFused(int64_t d, int64_t r) {
  return (d == 64 || d == 128) && r % 32 == 0 && 2 * r <= d;
}

cudaError_t LaunchAttentionPrologue(const PrologueArgs& a, cudaStream_t stream) {
  const int64_t units = a.rows * (a.hq + 2 * a.hk);
  if (units == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(
      std::clamp<int64_t>((units + kWarpsPerCta - 1) / kWarpsPerCta, 1, int64_t{1} << 20)));
  if (a.dims.head_dim == 64) {
    return LaunchPdl(AttentionPrologueKernel<2>, grid, dim3(kThreads), 0, stream, a);
  }
  return LaunchPdl(AttentionPrologueKernel<4>, grid, dim3(kThreads), 0, stream, a);
}

}  // namespace strata::cuda
