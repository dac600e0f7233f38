// On-device sampling (abi.h strata_sample_params), no sort. Two kernels per call: plain greedy
// rows on one thread block each (one pass over the row; this file); rows that draw or want
// logprobs on a cluster of 8 blocks each that keeps the row in shared memory
// (kernels_sample_cluster.cu). Rows wider than the cluster's shared memory holds take the
// one-block kernel for everything. The rule both follow, and how a step of it is found (a radix
// select, then the ties in id order): kernels_sample_rule.cuh.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels_sample_rule.cuh"

#ifndef STRATA_SAMPLE_CLUSTER
#define STRATA_SAMPLE_CLUSTER 1
#endif

namespace strata::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct Shared {
  double hist[256];  // one radix pass's bins
  double warp_d[kWarps];
  float warp_f[kWarps];
  int32_t warp_i[kWarps];
  double res_d;  // a block reduction's result, broadcast
  float res_f;
  int32_t res_i;
  double before;
  uint32_t prefix;
  int found;  // the select crossed its target
  int32_t tie_id;
};

// Block reductions: each warp reduces with shuffles, warp 0 combines the warps' values and
// broadcasts through shared memory (every thread gets the result).
__device__ double BlockSum(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh.warp_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double t = sh.warp_d[lane];
    for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
    if (lane == 0) sh.res_d = t;
  }
  __syncthreads();
  return sh.res_d;
}

__device__ uint32_t BlockMin(uint32_t v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(0xffffffffu, v, o));
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh.warp_i[warp] = static_cast<int32_t>(v);
  __syncthreads();
  if (warp == 0) {
    uint32_t t = static_cast<uint32_t>(sh.warp_i[lane]);
    for (int o = 16; o > 0; o >>= 1) t = min(t, __shfl_down_sync(0xffffffffu, t, o));
    if (lane == 0) sh.res_i = static_cast<int32_t>(t);
  }
  __syncthreads();
  return static_cast<uint32_t>(sh.res_i);
}

// The first element in candidate order among those each thread offers (value, id).
__device__ void BlockFirst(float& v, int32_t& id, Shared& sh) {
  WarpFirst(v, id);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh.warp_f[warp] = v, sh.warp_i[warp] = id;
  __syncthreads();
  if (warp == 0) {
    float t = sh.warp_f[lane];
    int32_t ti = sh.warp_i[lane];
    WarpFirst(t, ti);
    if (lane == 0) sh.res_f = t, sh.res_i = ti;
  }
  __syncthreads();
  v = sh.res_f, id = sh.res_i;
}

// Exclusive prefix sum of `v` over the block in thread order.
__device__ double BlockExclusiveSum(double v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += up;
  }
  __syncthreads();
  if (lane == 31) sh.warp_d[warp] = incl;
  __syncthreads();
  if (warp == 0) {  // the warps' totals -> their exclusive prefixes, in place
    const double total = sh.warp_d[lane];
    double t = total;
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += up;
    }
    sh.warp_d[lane] = t - total;
  }
  __syncthreads();
  return sh.warp_d[warp] + incl - v;
}

// One row as the select sees it: x[i] = load(row, i) / temperature (1: raw), the mass of an
// element exp(double(x) - max).
template <typename T>
struct Row {
  const T* data;
  int64_t vocab;
  float temperature;  // 0: the raw logits
  double max;
  __device__ float X(int64_t i) const {
    const float v = Load(data, i);
    return temperature > 0.0f ? __fdiv_rn(v, temperature) : v;
  }
  __device__ double Mass(float x) const { return exp(static_cast<double>(x) - max); }
};

// The first element (in candidate order, among those inside `within`) at which the running sum
// of its weight (1 per element when `count`, else its mass) reaches `target` (`strict`: exceeds
// it). Returns whether one does; the Cut through it goes to *out.
template <typename T>
__device__ bool Select(const Row<T>& row, const Cut& within, bool count, double target, bool strict,
                       Cut* out, Shared& sh) {
  auto crosses = [&](double acc) { return strict ? acc > target : acc >= target; };
  if (threadIdx.x == 0) sh.before = 0, sh.prefix = 0, sh.found = 0;
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix;
    // Whole warps walk the row together so that lanes adding to the same bin can be summed
    // with shuffles first (one shared atomic per distinct bin per warp, not one per element:
    // a row's keys crowd into a few bins, and 1,024 threads adding to one double serialize).
    for (int64_t base = 0; base < row.vocab; base += kThreads) {
      const int64_t i = base + threadIdx.x;
      bool active = false;
      uint32_t bin = 0;
      double w = 0;
      if (i < row.vocab) {
        const float x = row.X(i);
        const uint32_t k = Key(x);
        if ((k & mask) == prefix && In(k, static_cast<int32_t>(i), within)) {
          active = true;
          bin = (k >> shift) & 255u;
          w = count ? 1.0 : row.Mass(x);
        }
      }
      AddToBins(sh.hist, active, bin, w);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      sh.found = TakeCrossingBin(sh.hist, crosses, shift, prefix, &sh.before, &sh.prefix);
    }
    __syncthreads();
    if (!sh.found) return false;
    mask |= 255u << shift;
  }
  // Ties at the key found, in id order: each thread sums one contiguous chunk of ids.
  const uint32_t key = sh.prefix;
  const int64_t chunk = (row.vocab + kThreads - 1) / kThreads;
  const int64_t lo = threadIdx.x * chunk, hi = min(row.vocab, lo + chunk);
  double mine = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const float x = row.X(i);
    if (Key(x) == key && In(key, static_cast<int32_t>(i), within)) {
      mine += count ? 1.0 : row.Mass(x);
    }
  }
  if (threadIdx.x == 0) sh.tie_id = INT_MAX;
  double acc = sh.before + BlockExclusiveSum(mine, sh);  // its syncs publish tie_id
  if (!crosses(acc) && crosses(acc + mine)) {            // exactly one thread's chunk crosses
    for (int64_t i = lo; i < hi; ++i) {
      const float x = row.X(i);
      if (Key(x) != key || !In(key, static_cast<int32_t>(i), within)) continue;
      acc += count ? 1.0 : row.Mass(x);
      if (crosses(acc)) {
        sh.tie_id = static_cast<int32_t>(i);
        break;
      }
    }
  }
  __syncthreads();
  if (sh.tie_id == INT_MAX) return false;  // rounding: the ties did not reach the target
  *out = Cut{key, sh.tie_id};
  return true;
}

// Sum of the mass of the elements inside `c`.
template <typename T>
__device__ double MassIn(const Row<T>& row, const Cut& c, Shared& sh) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
    const float x = row.X(i);
    if (In(Key(x), static_cast<int32_t>(i), c)) s += row.Mass(x);
  }
  return BlockSum(s, sh);
}

// The first (or, with `last`, the last) element of `c` in candidate order.
template <typename T>
__device__ int32_t Extreme(const Row<T>& row, const Cut& c, bool last, Shared& sh) {
  float v = last ? INFINITY : -INFINITY;
  int32_t id = last ? -1 : INT_MAX;
  for (int64_t i = threadIdx.x; i < row.vocab; i += kThreads) {
    const float x = row.X(i);
    if (!In(Key(x), static_cast<int32_t>(i), c)) continue;
    const int32_t ii = static_cast<int32_t>(i);
    // The last in order is the first in the reversed order: smaller value, then higher id.
    if (last ? Before(-x, -ii, -v, -id) : Before(x, ii, v, id)) v = x, id = ii;
  }
  if (last) {
    float nv = -v;
    int32_t nid = -id;
    BlockFirst(nv, nid, sh);
    return -nid;
  }
  BlockFirst(v, id, sh);
  return id;
}

// The greedy token of a row: what Extreme(raw row, every element) returns (largest logit, then
// lowest id; NaN never wins). A bf16 row on a 16-byte boundary is read 8 logits per load, each
// thread issuing kGreedyLoads loads before it compares any (the scalar loop above keeps one
// 2-byte load in flight per thread: a 128k-entry row took ~125 dependent rounds).
constexpr int kGreedyLoads = 8;

template <typename T>
__device__ int32_t Greedy(const T* data, int64_t vocab, Shared& sh) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (reinterpret_cast<uintptr_t>(data) % 16 == 0 && vocab < INT_MAX) {
      const int32_t n = static_cast<int32_t>(vocab), chunks = n / 8;
      float v = -INFINITY;
      int32_t id = INT_MAX;
      ForEachChunk<kThreads, kGreedyLoads>(reinterpret_cast<const uint4*>(data), chunks,
                                           [&](int32_t c, const bf16* e) {
#pragma unroll
                                             for (int k = 0; k < 8; ++k) {
                                               const float x = __bfloat162float(e[k]);
                                               if (Before(x, c * 8 + k, v, id)) {
                                                 v = x, id = c * 8 + k;
                                               }
                                             }
                                           });
      for (int32_t i = chunks * 8 + static_cast<int32_t>(threadIdx.x); i < n; i += kThreads) {
        const float x = __bfloat162float(data[i]);
        if (Before(x, i, v, id)) v = x, id = i;
      }
      BlockFirst(v, id, sh);
      return id;
    }
  }
  return Extreme(Row<T>{data, vocab, 0.0f, 0.0}, Cut{}, false, sh);
}

// The sampling rule of abi.h for one row with temperature > 0.
template <typename T>
__device__ int32_t Draw(const T* data, int64_t vocab, const strata_sample_params& p, Shared& sh) {
  Row<T> row{data, vocab, p.temperature, 0.0};
  const Cut all;
  const int32_t first = Extreme(row, all, false, sh);
  row.max = row.X(first);
  Cut keep = all;
  if (p.top_k > 0 && p.top_k < vocab) Select(row, all, true, p.top_k, false, &keep, sh);
  const double total = MassIn(row, keep, sh);
  const Cut counted = keep;
  if (p.top_p < 1.0f) {
    Cut c;
    if (Select(row, keep, false, static_cast<double>(p.top_p) * total, false, &c, sh)) keep = c;
  }
  if (p.min_p > 0.0f) {
    // p_i >= min_p * p_0 holds on a prefix made of whole tie groups (p_0 = 1 / total).
    const double threshold = static_cast<double>(p.min_p) * (1.0 / total);
    uint32_t lowest = UINT32_MAX;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float x = row.X(i);
      const uint32_t k = Key(x);
      if (In(k, static_cast<int32_t>(i), keep) && row.Mass(x) / total >= threshold) {
        lowest = min(lowest, k);
      }
    }
    lowest = BlockMin(lowest, sh);
    if (lowest > keep.key) keep = Cut{lowest, INT_MAX};
  }
  // (the same sum again when neither cut moved)
  const bool moved = keep.key != counted.key || keep.id != counted.id;
  const double kept = moved ? MassIn(row, keep, sh) : total;
  Cut at;
  if (Select(row, keep, false, p.uniform * kept, true, &at, sh)) return at.id;
  return Extreme(row, keep, true, sh);
}

template <typename T>
__device__ void Logprobs(const T* data, int64_t vocab, int32_t token, int n, float* lp,
                         int32_t* top, Shared& sh) {
  Row<T> raw{data, vocab, 0.0f, 0.0};
  const int32_t first = Extreme(raw, Cut{}, false, sh);
  const float max = raw.X(first);
  double s = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    s += exp(static_cast<double>(raw.X(i) - max));
  }
  const double sum = BlockSum(s, sh);
  const float log_z = max + static_cast<float>(log(sum));
  if (threadIdx.x == 0) lp[0] = raw.X(token) - log_z;
  // The top n in order: each pass takes the first element after the previous one.
  float pv = INFINITY;
  int32_t pid = -1;
  for (int j = 0; j < n && j < vocab; ++j) {
    float v = -INFINITY;
    int32_t id = INT_MAX;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float x = raw.X(i);
      const int32_t ii = static_cast<int32_t>(i);
      if (Before(pv, pid, x, ii) && Before(x, ii, v, id)) v = x, id = ii;
    }
    BlockFirst(v, id, sh);
    if (threadIdx.x == 0) {
      lp[1 + j] = v - log_z;
      top[j] = id;
    }
    pv = v, pid = id;
  }
}

// `plain_only`: the rows ClusterRow picks are left to the cluster kernel launched after this one.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    SampleKernel(const T* logits, int64_t stride, int64_t vocab, const strata_sample_params* params,
                 int32_t* tokens, float* logprobs, int64_t lp_stride, int32_t* top_ids,
                 int64_t top_stride, bool plain_only) {
  __shared__ Shared sh;
  WaitForPrerequisites();  // the logits (programmatic dependent launch)
  AllowDependents();
  const int64_t r = blockIdx.x;
  const T* data = logits + r * stride;
  const strata_sample_params p = Clamped(params[r]);
  if (plain_only && ClusterRow(p, logprobs != nullptr && top_ids != nullptr)) return;
  int32_t token;
  if (p.temperature == 0.0f) {
    token = Greedy(data, vocab, sh);
  } else {
    token = Draw(data, vocab, p, sh);
  }
  if (threadIdx.x == 0) tokens[r] = token;
  if (p.num_logprobs >= 0 && logprobs != nullptr && top_ids != nullptr) {
    Logprobs(data, vocab, token, min(p.num_logprobs, STRATA_MAX_LOGPROBS), logprobs + r * lp_stride,
             top_ids + r * top_stride, sh);
  }
}

// The one-block kernel over every row (`plain_only`: the plain greedy rows), with programmatic
// dependent launch: its CTAs are scheduled while the LM head's GEMM drains.
cudaError_t LaunchOneBlock(const void* logits, bool f32, int64_t stride, int64_t rows,
                           int64_t vocab, const strata_sample_params* params, int32_t* tokens,
                           float* logprobs, int64_t lp_stride, int32_t* top_ids, int64_t top_stride,
                           bool plain_only, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(rows));
  if (f32) {
    return LaunchPdl(SampleKernel<float>, grid, dim3(kThreads), 0, stream,
                     static_cast<const float*>(logits), stride, vocab, params, tokens, logprobs,
                     lp_stride, top_ids, top_stride, plain_only);
  }
  return LaunchPdl(SampleKernel<bf16>, grid, dim3(kThreads), 0, stream,
                   static_cast<const bf16*>(logits), stride, vocab, params, tokens, logprobs,
                   lp_stride, top_ids, top_stride, plain_only);
}

}  // namespace

cudaError_t LaunchSample(const void* logits, bool f32, int64_t stride, int64_t rows, int64_t vocab,
                         const strata_sample_params* params, int32_t* tokens, float* logprobs,
                         int64_t lp_stride, int32_t* top_ids, int64_t top_stride,
                         cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // Rows that draw or want logprobs: a cluster per row while its slices' keys fit in shared
  // memory (every vocabulary in use), after the one-block kernel has taken the plain greedy
  // rows. -DSTRATA_SAMPLE_CLUSTER=0 builds the plugin without it, to time the step both ways.
  if (STRATA_SAMPLE_CLUSTER && SampleClusterFits(rows, vocab)) {
    cudaError_t err = LaunchOneBlock(logits, f32, stride, rows, vocab, params, tokens, logprobs,
                                     lp_stride, top_ids, top_stride, /*plain_only=*/true, stream);
    if (err != cudaSuccess) return err;
    return LaunchSampleCluster(logits, f32, stride, rows, vocab, params, tokens, logprobs,
                               lp_stride, top_ids, top_stride, stream);
  }
  return LaunchSampleOneBlock(logits, f32, stride, rows, vocab, params, tokens, logprobs, lp_stride,
                              top_ids, top_stride, stream);
}

cudaError_t LaunchSampleOneBlock(const void* logits, bool f32, int64_t stride, int64_t rows,
                                 int64_t vocab, const strata_sample_params* params, int32_t* tokens,
                                 float* logprobs, int64_t lp_stride, int32_t* top_ids,
                                 int64_t top_stride, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return LaunchOneBlock(logits, f32, stride, rows, vocab, params, tokens, logprobs, lp_stride,
                        top_ids, top_stride, /*plain_only=*/false, stream);
}

}  // namespace strata::cuda
