#pragma once
// One attention head of attention_prologue, held by one warp (lane l holds elements l + 32 i):
// the q/k RMSNorm, then the rotary embedding, with the separate kernels' arithmetic and bf16
// roundings between the steps. Shared by the prologue kernel (kernels_prologue.cu) and the
// decode-attention kernel that runs the prologue itself (kernels_decode_attention.cu), so the
// two paths agree bit for bit.
#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {

template <int kPerLane>
__device__ __forceinline__ void LoadHead(const bf16* head, float (&x)[kPerLane], int lane) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) x[i] = __bfloat162float(head[lane + 32 * i]);
}

// `norm` may be null (no q/k norm). Pairs (e, e + r) for e < r sit in one lane, r / 32
// registers apart (AttentionPrologueFused: r is a multiple of 32).
template <int kPerLane>
__device__ __forceinline__ void NormRopeHead(float (&x)[kPerLane], const bf16* norm, float eps,
                                             float pos, const float* inv_freq, int r, float mscale,
                                             int lane) {
  constexpr int d = 32 * kPerLane;
  if (norm != nullptr) {
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) sq += x[i] * x[i];
    for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    const float inv = rsqrtf(sq / static_cast<float>(d) + eps);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      x[i] =
          __bfloat162float(__float2bfloat16((x[i] * inv) * __bfloat162float(norm[lane + 32 * i])));
    }
  }
  const int pair = r / 32;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (i >= pair) break;
    const float angle = pos * inv_freq[lane + 32 * i];
    float s, c;
    sincosf(angle, &s, &c);
    c *= mscale;
    s *= mscale;
    const float x0 = x[i], x1 = x[i + pair];
    x[i] = __bfloat162float(__float2bfloat16(x0 * c - x1 * s));
    x[i + pair] = __bfloat162float(__float2bfloat16(x1 * c + x0 * s));
  }
}

// The pool row (k plane; the v plane is `plane` elements further) of `slot` in `layer`, or
// null when the slot is outside the pool (the token is not stored).
__device__ __forceinline__ bf16* PoolRow(const PrologueArgs& a, int32_t slot) {
  if (slot < 0 || slot >= a.dims.num_blocks * a.dims.block_size) return nullptr;
  const int64_t plane = a.dims.block_size * a.dims.num_kv_heads * a.dims.head_dim;
  const int64_t block = slot / a.dims.block_size, offset = slot % a.dims.block_size;
  return a.cache + ((block * a.dims.num_layers + a.layer) * 2) * plane +
         offset * a.dims.num_kv_heads * a.dims.head_dim;
}

}  // namespace strata::cuda
