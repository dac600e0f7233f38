// moe_route's rule for one row held by one warp, shared by the route kernel
// (kernels_kv_moe.cu) and the decode-sized expert kernels that route for themselves
// (kernels_moe_vector.cu). Device code only; included by .cu files.
//
// The rule (abi.h moe_route): p = softmax(logits row) in fp32; the top_k experts by p, larger
// first, NaN ranked as -inf, ties to the lower id; weights p (divided by their sum, in the
// order chosen, when renormalizing and the sum is positive).
//
// Lane l holds experts l + 32 i (i < V). Each of the k rounds is two warp reductions
// (redux.sync) over 32-bit keys: the largest key, then the lowest id among the lanes whose
// candidate has it. A key orders like the old (probability, NaN as -inf) pair because
// probabilities are never negative: 0 = taken or no such expert, 1 = NaN, otherwise the
// probability's bits + 2 (non-negative floats order like their bit patterns).
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

namespace strata::cuda {

constexpr int kRouteMaxK = 64;  // every model's router; larger top_k use the shared-memory kernel

// Routes one row: chosen_id[j] / chosen_weight[j] for j < top_k (shared or global memory,
// written by the warp's lanes; __syncwarp'd before returning). An expert id of -1 and weight 0
// mark a round with no expert left (top_k > experts).
template <int V>
__device__ __forceinline__ void RouteRowWarp(const __nv_bfloat16* row, int32_t experts,
                                             int32_t top_k, bool renormalize, int* chosen_id,
                                             float* chosen_weight) {
  const unsigned lane = threadIdx.x % 32;
  float prob[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int e = static_cast<int>(lane) + 32 * i;
    prob[i] = e < experts ? __bfloat162float(row[e]) : -INFINITY;
  }
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < V; ++i) max = fmaxf(max, prob[i]);
  for (int o = 16; o > 0; o >>= 1) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, o));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (static_cast<int>(lane) + 32 * i < experts) {
      prob[i] = expf(prob[i] - max);
      sum += prob[i];
    }
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  unsigned key[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    prob[i] /= sum;
    key[i] = static_cast<int>(lane) + 32 * i >= experts ? 0u
             : isnan(prob[i])                           ? 1u
                                                        : __float_as_uint(prob[i]) + 2u;
  }
  for (int32_t j = 0; j < top_k; ++j) {
    unsigned mine = 0;
    int slot = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (key[i] > mine) mine = key[i], slot = i;  // strict: the lower id on a tie
    }
    const unsigned best_key = __reduce_max_sync(0xffffffffu, mine);
    const unsigned id = lane + 32u * static_cast<unsigned>(slot);
    const unsigned best = __reduce_min_sync(0xffffffffu, mine == best_key ? id : 0xffffffffu);
    if (best_key == 0) {  // nothing left to choose
      if (lane == 0) chosen_id[j] = -1, chosen_weight[j] = 0.0f;
      continue;
    }
    if (best == id) {
#pragma unroll
      for (int i = 0; i < V; ++i) {
        if (i == slot) {
          key[i] = 0;
          chosen_id[j] = static_cast<int>(id);
          chosen_weight[j] = prob[i];
        }
      }
    }
  }
  __syncwarp();
  // The sum in the order chosen, as the one-lane kernels do.
  float kept = 0.0f;
  for (int32_t j = 0; j < top_k; ++j) kept += chosen_weight[j];
  const float norm = renormalize && kept > 0.0f ? 1.0f / kept : 1.0f;
  __syncwarp();
  for (int32_t j = static_cast<int32_t>(lane); j < top_k; j += 32) chosen_weight[j] *= norm;
  __syncwarp();
}

}  // namespace strata::cuda
