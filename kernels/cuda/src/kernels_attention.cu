// Paged causal attention, the general kernel: one warp per (query row, query head). Each lane holds up to
// eight head-dim elements (d = lane + 32 * i) of q and of the fp32 output accumulator; the warp
// walks the row's keys one at a time: a shuffle-reduced q.k score, an online-softmax update
// (running max m, running sum l) and acc = acc * correction + p * v, all in fp32.
// Correct for any block size, GQA ratio, window and head_dim <= 256; not fast (see NOTES.md).
#include <algorithm>
#include <cmath>

#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kPerLane = kMaxAttentionHeadDim / 32;

// The sequence that owns query row t: the last s with q_start[s] <= t, or -1 when no sequence
// owns t (rows past q_start[num_seqs], or a malformed q_start).
__device__ int FindSequence(const int32_t* q_start, int num_seqs, int64_t t) {
  int lo = 0, hi = num_seqs - 1, found = -1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (q_start[mid] <= t) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (found < 0 || t >= q_start[found + 1]) return -1;
  return found;
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) AttentionKernel(AttentionArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t item = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (item >= a.rows * a.q_heads) return;
  const int64_t t = item / a.q_heads, h = item % a.q_heads;
  const int s = FindSequence(a.q_start, a.num_seqs, t);
  if (s < 0) return;
  const int64_t q_len = a.q_start[s + 1] - a.q_start[s];
  const int64_t kv_len = a.kv_len[s];
  const int64_t bs = a.dims.block_size, d = a.dims.head_dim;
  if (kv_len < q_len || kv_len > int64_t{a.max_blocks_per_seq} * bs) return;
  const int64_t pos = kv_len - q_len + (t - a.q_start[s]);
  const int64_t first = a.sliding_window > 0 ? max(int64_t{0}, pos - a.sliding_window + 1) : 0;
  const int64_t kv_head = h / (a.q_heads / a.dims.num_kv_heads);
  const int64_t token_elems = a.dims.num_kv_heads * d;
  const int64_t plane = bs * token_elems;
  const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks_per_seq;

  float q[kPerLane], acc[kPerLane];
  const bf16* qrow = a.q + t * a.q_stride + h * d;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    q[i] = e < d ? __bfloat162float(qrow[e]) * a.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = first; p <= pos; ++p) {
    const int64_t block = table[p / bs];
    if (block < 0 || block >= a.dims.num_blocks) continue;
    const bf16* k = a.cache + (block * a.dims.num_layers + a.layer) * 2 * plane +
                    (p % bs) * token_elems + kv_head * d;
    const bf16* v = k + plane;
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      if (e < d) dot += q[i] * __bfloat162float(k[e]);
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float m_new = fmaxf(m, dot);
    const float correction = expf(m - m_new);
    const float prob = expf(dot - m_new);
    l = l * correction + prob;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      acc[i] = acc[i] * correction + (e < d ? prob * __bfloat162float(v[e]) : 0.0f);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* orow = a.out + t * a.out_stride + h * d;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    if (e < d) orow[e] = __float2bfloat16(acc[i] * inv);
  }
}

}  // namespace

cudaError_t LaunchAttention(const AttentionArgs& args, cudaStream_t stream) {
  const int64_t items = args.rows * args.q_heads;
  if (items == 0 || args.num_seqs == 0) return cudaSuccess;
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  AttentionKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace strata::cuda
