// The sampling rule's pieces that both sampling kernels share (kernels_sample.cu: one thread
// block per row; kernels_sample_cluster.cu: a cluster of blocks per row): the orderable keys,
// the candidate order, cuts, histogram adds, the radix pass's decision, the parameters' clamp.
//
// The rule orders a row's candidates by descending scaled logit, ties by ascending id, and
// every truncation keeps a prefix of that order, so each step is "find the element where a
// cumulative quantity (a count, or probability mass) over the order first crosses a target".
// That element is found with a 4-pass radix select on the logit's orderable 32-bit key (a
// 256-bin histogram of the quantity per pass, in shared memory, scanned from the top bin),
// then a scan in id order of the elements whose key equals the one found. A prefix is kept as
// a Cut: everything whose key is above `key`, and the elements with that key up to id `id`.
// Mass is exp(double(x) - max) in double, as the host rule computes it; sums are taken in a
// different order than the host's sequential loop, so a draw within ~1e-15 of a boundary may
// fall on the other side (abi.h allows it).
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"

namespace strata::cuda {

// kernels_sample_cluster.cu: whether `rows` rows of `vocab` ids take the cluster path (their
// slices' keys fit in shared memory), and its launch (rows that draw or want logprobs; the
// plain greedy rows are left to the one-block kernel launched before it).
bool SampleClusterFits(int64_t rows, int64_t vocab);
cudaError_t LaunchSampleCluster(const void* logits, bool f32, int64_t stride, int64_t rows,
                                int64_t vocab, const strata_sample_params* params, int32_t* tokens,
                                float* logprobs, int64_t lp_stride, int32_t* top_ids,
                                int64_t top_stride, cudaStream_t stream);

namespace {  // device code, compiled into each of the two files

struct Cut {
  uint32_t key = 0;
  int32_t id = INT_MAX;  // with key 0 and id INT_MAX: every element
};

__device__ __forceinline__ float Load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float Load(const bf16* p, int64_t i) { return __bfloat162float(p[i]); }

// Larger float -> larger key; -0 and +0 share one key (they compare equal).
__device__ __forceinline__ uint32_t Key(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool In(uint32_t key, int32_t id, const Cut& c) {
  return key > c.key || (key == c.key && id <= c.id);
}

// "a before b" in the candidate order: larger value, then lower id.
__device__ __forceinline__ bool Before(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

__device__ __forceinline__ void WarpFirst(float& v, int32_t& id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_down_sync(0xffffffffu, id, o);
    if (Before(ov, oi, v, id)) v = ov, id = oi;
  }
}

// Reads p[0, chunks) (16 bytes each: 8 bf16 values), chunk c by thread c % kBlock of a block of
// kBlock threads, issuing kLoads loads before it uses any, and calls visit(c, e) with each
// chunk's values (e: bf16[8]).
template <int kBlock, int kLoads, typename Visit>
__device__ __forceinline__ void ForEachChunk(const uint4* p, int32_t chunks, Visit&& visit) {
  for (int32_t base = threadIdx.x; base < chunks; base += kBlock * kLoads) {
    uint4 w[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int32_t c = base + u * kBlock;
      w[u] = c < chunks ? p[c] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int32_t c = base + u * kBlock;
      if (c >= chunks) break;
      visit(c, reinterpret_cast<const bf16*>(&w[u]));
    }
  }
}

// hist[bin] += w for every active lane of the warp: one atomic per distinct bin. A lane alone
// in its bin adds directly; the lanes sharing a bin are summed with shuffles first, one bin per
// round (a row's keys crowd into a few bins on a radix select's first digit, and every thread
// adding to one double serializes; on later digits most active lanes have bins of their own).
// Called by every lane of the warp.
__device__ __forceinline__ void AddToBins(double* hist, bool active, uint32_t bin, double w) {
  if (__ballot_sync(0xffffffffu, active) == 0) return;  // the usual case on later digits
  const unsigned peers = __match_any_sync(0xffffffffu, active ? bin : 0xffffffffu);
  const bool alone = active && __popc(peers) == 1;
  if (alone) atomicAdd(&hist[bin], w);
  unsigned todo = __ballot_sync(0xffffffffu, active && !alone);
  active = active && !alone;
  const int lane = threadIdx.x & 31;
  while (todo != 0) {
    const int src = __ffs(todo) - 1;
    const uint32_t b = __shfl_sync(0xffffffffu, bin, src);
    const bool mine = active && bin == b;
    double v = mine ? w : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == src) atomicAdd(&hist[b], v);
    todo &= ~__ballot_sync(0xffffffffu, mine);
  }
}

// hist[bin] += 1 for every active lane of the warp: one atomic per distinct bin, by its lowest
// lane. Called by every lane of the warp.
__device__ __forceinline__ void CountToBins(uint32_t* hist, bool active, uint32_t bin) {
  if (__ballot_sync(0xffffffffu, active) == 0) return;
  const unsigned peers = __match_any_sync(0xffffffffu, active ? bin : 0xffffffffu);
  if (active && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
    atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
  }
}

// One radix pass's decision, by one thread: scanning `hist` from the top bin with the running
// sum *before (what the bins above the prefix held), finds the bin where crosses(sum) first
// holds. If one does: *before becomes the sum of the bins above it, *prefix gains it as the
// digit at `shift`, and it returns true; else both stay and it returns false.
template <typename Crosses>
__device__ bool TakeCrossingBin(const double* hist, const Crosses& crosses, int shift,
                                uint32_t prefix, double* before, uint32_t* out_prefix) {
  double acc = *before;
  for (int b = 255; b >= 0; --b) {
    if (crosses(acc + hist[b])) {
      *before = acc;
      *out_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      return true;
    }
    acc += hist[b];
  }
  return false;
}

// Out-of-range values are clamped (the host validated them; device memory is not read back).
__device__ __forceinline__ strata_sample_params Clamped(strata_sample_params p) {
  p.temperature = p.temperature > 0.0f ? p.temperature : 0.0f;
  p.top_p = p.top_p > 0.0f ? fminf(p.top_p, 1.0f) : 1.0f;
  p.min_p = fminf(fmaxf(p.min_p, 0.0f), 1.0f);
  p.uniform = fmin(fmax(p.uniform, 0.0), 1.0);
  return p;
}

// Rows that draw (temperature > 0) or want logprobs take the cluster path where it exists; plain
// greedy rows (one pass, ~12-15 us) stay on one block: its single CTA becomes resident at once,
// where a cluster waits for eight free SMs of one GPC.
__device__ __forceinline__ bool ClusterRow(const strata_sample_params& p, bool logprobs) {
  return p.temperature > 0.0f || (p.num_logprobs >= 0 && logprobs);
}

}  // namespace
}  // namespace strata::cuda
