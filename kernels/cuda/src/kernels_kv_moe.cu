// KV cache kernels (kv_append, whole-block copies) and MoE routing (softmax + top-k); the
// expert kernels are in kernels_moe_experts.cu.
#include <algorithm>
#include <cmath>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"
#include "moe_route.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;

unsigned ElementBlocks(int64_t total) {
  return static_cast<unsigned>(
      std::min<int64_t>(std::max<int64_t>((total + kThreads - 1) / kThreads, 1), 1 << 20));
}

// One thread per element of one token's K (and V) row of Hk * D elements.
__global__ void KvAppendKernel(bf16* cache, CacheDims dims, int64_t layer, const bf16* k,
                               int64_t k_stride, const bf16* v, int64_t v_stride,
                               const int32_t* slots, int64_t rows) {
  WaitForPrerequisites();
  AllowDependents();
  const int64_t token_elems = dims.num_kv_heads * dims.head_dim;
  const int64_t plane = dims.block_size * token_elems;
  const int64_t total = rows * token_elems;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / token_elems, e = idx % token_elems;
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= dims.num_blocks * dims.block_size) continue;
    const int64_t block = slot / dims.block_size, offset = slot % dims.block_size;
    bf16* kp = cache + ((block * dims.num_layers + layer) * 2) * plane + offset * token_elems;
    kp[e] = k[t * k_stride + e];
    kp[plane + e] = v[t * v_stride + e];
  }
}

// blockIdx.y picks the block pair; threads stride over its words.
template <typename Word>
__global__ void CopyBlocksKernel(char* pool, int64_t block_bytes, int64_t num_blocks,
                                 const int32_t* src_ids, const int32_t* dst_ids, char* packed) {
  const int64_t i = blockIdx.y;
  const char* src;
  char* dst;
  if (src_ids != nullptr) {
    const int64_t b = src_ids[i];
    if (b < 0 || b >= num_blocks) return;
    src = pool + b * block_bytes;
  } else {
    src = packed + i * block_bytes;
  }
  if (dst_ids != nullptr) {
    const int64_t b = dst_ids[i];
    if (b < 0 || b >= num_blocks) return;
    dst = pool + b * block_bytes;
  } else {
    dst = packed + i * block_bytes;
  }
  if (src == dst) return;
  const int64_t words = block_bytes / static_cast<int64_t>(sizeof(Word));
  const Word* s = reinterpret_cast<const Word*>(src);
  Word* d = reinterpret_cast<Word*>(dst);
  for (int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; w < words;
       w += int64_t{gridDim.x} * blockDim.x) {
    d[w] = s[w];
  }
}

// (key, id) ordering of moe_route: larger probability first, NaN as -inf, then lower id.
__device__ __forceinline__ bool Better(float ka, int a, float kb, int b) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  return ka > kb || (ka == kb && a < b);
}

// One warp per row; `shared` holds the row's probabilities and taken flags.
__global__ void MoeRouteKernel(const bf16* logits, int64_t logits_stride, int64_t rows,
                               int64_t experts, int32_t top_k, bool renormalize, float* weights,
                               int64_t weights_stride, int32_t* ids, int64_t ids_stride) {
  extern __shared__ float shared[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t{blockDim.x / 32} + warp;
  if (t >= rows) return;
  WaitForPrerequisites();  // the router logits, and the previous call's readers of ids
  AllowDependents();
  float* prob = shared + warp * 2 * experts;
  float* taken = prob + experts;
  const bf16* row = logits + t * logits_stride;
  float max = -INFINITY;
  for (int64_t e = lane; e < experts; e += 32) max = fmaxf(max, __bfloat162float(row[e]));
  for (int o = 16; o > 0; o >>= 1) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
  float sum = 0.0f;
  for (int64_t e = lane; e < experts; e += 32) {
    prob[e] = expf(__bfloat162float(row[e]) - max);
    taken[e] = 0.0f;
    sum += prob[e];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int64_t e = lane; e < experts; e += 32) prob[e] /= sum;
  __syncwarp();
  float kept = 0.0f;
  for (int32_t j = 0; j < top_k; ++j) {
    float best_key = -INFINITY;
    int best = -1;
    for (int64_t e = lane; e < experts; e += 32) {
      if (taken[e] != 0.0f) continue;
      const float key = isnan(prob[e]) ? -INFINITY : prob[e];
      if (Better(key, static_cast<int>(e), best_key, best))
        best_key = key, best = static_cast<int>(e);
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other_key = __shfl_xor_sync(0xffffffffu, best_key, o);
      const int other = __shfl_xor_sync(0xffffffffu, best, o);
      if (Better(other_key, other, best_key, best)) best_key = other_key, best = other;
    }
    if (lane == 0) {
      taken[best] = 1.0f;
      ids[t * ids_stride + j] = best;
      kept += prob[best];
    }
    __syncwarp();
  }
  if (lane == 0) {
    const float norm = renormalize && kept > 0.0f ? 1.0f / kept : 1.0f;
    for (int32_t j = 0; j < top_k; ++j) {
      weights[t * weights_stride + j] = prob[ids[t * ids_stride + j]] * norm;
    }
  }
}

// The same rule with the row in registers (moe_route.cuh), for rows of up to 32 * V experts
// and top_k <= kRouteMaxK: one warp per row. The arithmetic is the shared-memory kernel's, in
// the same order, so the two agree bit for bit.
template <int V>
__global__ void MoeRouteRegistersKernel(const bf16* logits, int64_t logits_stride, int64_t rows,
                                        int32_t experts, int32_t top_k, bool renormalize,
                                        float* weights, int64_t weights_stride, int32_t* ids,
                                        int64_t ids_stride) {
  constexpr int kWarps = 4;
  __shared__ float chosen_weight[kWarps][kRouteMaxK];
  __shared__ int chosen_id[kWarps][kRouteMaxK];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t{kWarps} + warp;
  if (t >= rows) return;
  WaitForPrerequisites();  // the router logits, and the previous call's readers of ids
  AllowDependents();
  RouteRowWarp<V>(logits + t * logits_stride, experts, top_k, renormalize, chosen_id[warp],
                  chosen_weight[warp]);
  for (int32_t j = lane; j < top_k; j += 32) {
    ids[t * ids_stride + j] = chosen_id[warp][j];
    weights[t * weights_stride + j] = chosen_weight[warp][j];
  }
}

}  // namespace

cudaError_t LaunchKvAppend(bf16* cache, const CacheDims& dims, int64_t layer, const bf16* k,
                           int64_t k_stride, const bf16* v, int64_t v_stride, const int32_t* slots,
                           int64_t rows, cudaStream_t stream) {
  const int64_t total = rows * dims.num_kv_heads * dims.head_dim;
  if (total == 0) return cudaSuccess;
  return LaunchPdl(KvAppendKernel, ElementBlocks(total), kThreads, 0, stream, cache, dims, layer, k,
                   k_stride, v, v_stride, slots, rows);
}

cudaError_t LaunchCopyBlocks(char* pool, int64_t block_bytes, int64_t num_blocks,
                             const int32_t* src_ids, const int32_t* dst_ids, char* packed,
                             int64_t n, cudaStream_t stream) {
  if (n == 0 || block_bytes == 0) return cudaSuccess;
  for (int64_t first = 0; first < n; first += 65535) {
    const int64_t count = std::min<int64_t>(65535, n - first);
    const int32_t* s = src_ids != nullptr ? src_ids + first : nullptr;
    const int32_t* d = dst_ids != nullptr ? dst_ids + first : nullptr;
    char* p = packed != nullptr ? packed + first * block_bytes : nullptr;
    const bool wide = block_bytes % 16 == 0 && Aligned16(pool) && Aligned16(packed);
    const int64_t words = wide ? block_bytes / 16 : block_bytes;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((words + kThreads - 1) / kThreads, 64)),
                    static_cast<unsigned>(count));
    if (wide) {
      CopyBlocksKernel<uint4>
          <<<grid, kThreads, 0, stream>>>(pool, block_bytes, num_blocks, s, d, p);
    } else {
      CopyBlocksKernel<unsigned char>
          <<<grid, kThreads, 0, stream>>>(pool, block_bytes, num_blocks, s, d, p);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t LaunchMoeRoute(const bf16* logits, int64_t logits_stride, int64_t rows, int64_t experts,
                           int32_t top_k, bool renormalize, float* weights, int64_t weights_stride,
                           int32_t* ids, int64_t ids_stride, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  constexpr int kWarps = 4;
  const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  // Programmatic dependent launch: the launch overlaps the router GEMM's tail, and the experts'
  // first kernel (also launched so) overlaps this one's.
  const dim3 grid(blocks), block(kWarps * 32);
  const int32_t e = static_cast<int32_t>(experts);
  if (top_k <= kRouteMaxK && experts <= 256) {
    auto launch = [&](auto kernel) {
      return LaunchPdl(kernel, grid, block, 0, stream, logits, logits_stride, rows, e, top_k,
                       renormalize, weights, weights_stride, ids, ids_stride);
    };
    if (experts <= 32) return launch(MoeRouteRegistersKernel<1>);
    if (experts <= 64) return launch(MoeRouteRegistersKernel<2>);
    if (experts <= 128) return launch(MoeRouteRegistersKernel<4>);
    return launch(MoeRouteRegistersKernel<8>);
  }
  // Up to 4 x 2 x 4,096 floats (128 KiB) of shared memory: above the default 48 KiB limit.
  const cudaError_t err = AllowDynamicSmem<MoeRouteKernel>(kWarps * 2 * 4096 * sizeof(float));
  if (err != cudaSuccess) return err;
  return LaunchPdl(MoeRouteKernel, grid, block, kWarps * 2 * experts * sizeof(float), stream,
                   logits, logits_stride, rows, experts, top_k, renormalize, weights,
                   weights_stride, ids, ids_stride);
}

}  // namespace strata::cuda
