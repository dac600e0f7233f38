// On-device sampling (abi.h strata_sample_params), no sort. Two kernels per call: plain greedy
// rows on one thread block each (one pass over the row); rows that draw or want logprobs on a
// cluster of 8 blocks each that keeps the row in shared memory ("The cluster path" below).
// Rows wider than the cluster's shared memory holds take the one-block kernel for everything.
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
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda_kernels.h"
#include "device_util.cuh"

#ifndef STRATA_SAMPLE_CLUSTER
#define STRATA_SAMPLE_CLUSTER 1
#endif

namespace strata::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

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

__device__ __forceinline__ void WarpFirst(float& v, int32_t& id) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_down_sync(0xffffffffu, id, o);
    if (Before(ov, oi, v, id)) v = ov, id = oi;
  }
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
      const uint4* p = reinterpret_cast<const uint4*>(data);
      float v = -INFINITY;
      int32_t id = INT_MAX;
      for (int32_t base = threadIdx.x; base < chunks; base += kThreads * kGreedyLoads) {
        uint4 w[kGreedyLoads];
#pragma unroll
        for (int j = 0; j < kGreedyLoads; ++j) {
          const int32_t c = base + j * kThreads;
          w[j] = c < chunks ? p[c] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < kGreedyLoads; ++j) {
          const int32_t c = base + j * kThreads;
          if (c >= chunks) break;
          const bf16* e = reinterpret_cast<const bf16*>(&w[j]);
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const float x = __bfloat162float(e[k]);
            if (Before(x, c * 8 + k, v, id)) v = x, id = c * 8 + k;
          }
        }
      }
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

// ---------------------------------------------------------------------------------------------
// The cluster path: one row per thread-block cluster of kCtas CTAs. CTA `rank` owns ids
// [rank * slice, (rank + 1) * slice) and keeps their orderable keys in shared memory, loaded
// once; every pass of the rule above (the radix selects, the mass sums, the extremes) then reads
// shared memory only, over 1/kCtas of the row, and the CTAs combine their parts through
// distributed shared memory. The rule, the order of the candidates and the passes are the same
// as the one-block kernel's; only the order in which doubles are summed differs (rank by rank).
// A top-k of at most kMaxGather ids (rows without logprobs) is gathered into rank 0 once it is
// cut, and rank 0 runs the rest of the rule alone over those ids while the other seven CTAs
// leave (at a full GPU their SMs take the next rows' clusters).
//
// Exchange: a CTA's part goes into one of two alternating slots of its own shared memory, one
// cluster barrier publishes it, and every CTA combines all the parts in rank order (so all get
// the same bits). A slot is written again only two exchanges later, after a barrier that every
// reader of its previous value has passed.
namespace cl {

namespace cg = cooperative_groups;

constexpr int kCtas = 8;  // the portable cluster size
constexpr int kMaxWarps = 32;
// Keys one CTA keeps (4 bytes each, 192 KiB): rows up to kCtas * kMaxSlice wide use this path.
constexpr int64_t kMaxSlice = 48 * 1024;
// A top-k cut of at most this many elements is gathered into rank 0, which draws alone.
constexpr int kMaxGather = 1024;

struct Shared {
  double hist[2][256];     // this CTA's radix histogram (alternating slots)
  uint32_t count[2][256];  // the same for a count select
  double total[256];       // the cluster's
  double warp_d[kMaxWarps];
  float warp_f[kMaxWarps];
  int32_t warp_i[kMaxWarps];
  double part_d[2];  // this CTA's part of an exchange (alternating slots)
  float part_f[2];
  int32_t part_i[2];
  double before;
  uint32_t prefix;
  int found;
  // Rank 0's copy of a small kept set (Slice::Gather): keys and ids in id order.
  uint32_t gather_keys[kMaxGather];
  int32_t gather_ids[kMaxGather];
};

__device__ __forceinline__ float FromKey(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// One row's slice as this CTA (of kThreads threads) sees it. keys[j] is the key of id lo + j
// (scaled by the temperature while drawing; raw for greedy and logprobs).
template <int kThreads>
struct Slice {
  static constexpr int kWarps = kThreads / 32;
  cg::cluster_group cluster;
  Shared& sh;
  uint32_t* keys;
  int rank;
  int32_t lo;
  int n;           // ids this CTA owns (0 past the row's end)
  double max = 0;  // mass of x: exp(double(x) - max)
  int slot_d = 0, slot_h = 0;
  // After Gather, in rank 0: keys[j] is the key of id ids[j], and the exchanges take this
  // CTA's part only (ranks 1, block barriers instead of cluster barriers).
  const int32_t* ids = nullptr;
  int ranks = kCtas;

  __device__ double Mass(float x) const { return exp(static_cast<double>(x) - max); }
  __device__ int32_t Id(int j) const { return ids != nullptr ? ids[j] : lo + j; }
  // The length of the contiguous run of the slice each thread takes where id order matters
  // (ties, Gather): odd, so that the warp's lanes, a run apart, read 32 different banks.
  __device__ int Chunk() const { return (n + kThreads - 1) / kThreads | 1; }
  // Publishes the parts written before it to every CTA of the exchange.
  __device__ void Publish() {
    if (ranks > 1) {
      cluster.sync();
    } else {
      __syncthreads();
    }
  }

  // The sum over the cluster of every thread's `v` (identical in every thread of every CTA).
  __device__ double Sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh.warp_d[warp] = v;
    __syncthreads();
    if (warp == 0) {
      double t = lane < kWarps ? sh.warp_d[lane] : 0.0;
      for (int o = 16; o > 0; o >>= 1) t += __shfl_down_sync(0xffffffffu, t, o);
      if (lane == 0) sh.part_d[slot_d] = t;
    }
    Publish();
    double total = 0;
    for (int r = 0; r < ranks; ++r) total += cluster.map_shared_rank(sh.part_d, r)[slot_d];
    slot_d ^= 1;
    return total;
  }

  // The sum over the ranks below this CTA's of each CTA's `cta_total` (given by its last
  // thread).
  __device__ double RanksBelow(double cta_total) {
    if (threadIdx.x == kThreads - 1) sh.part_d[slot_d] = cta_total;
    Publish();
    double below = 0;
    for (int r = 0; r < rank; ++r) below += cluster.map_shared_rank(sh.part_d, r)[slot_d];
    slot_d ^= 1;
    return below;
  }

  __device__ uint32_t Min(uint32_t v) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh.warp_i[warp] = static_cast<int32_t>(v);
    __syncthreads();
    if (warp == 0) {
      uint32_t t = lane < kWarps ? static_cast<uint32_t>(sh.warp_i[lane]) : UINT32_MAX;
      for (int o = 16; o > 0; o >>= 1) t = min(t, __shfl_down_sync(0xffffffffu, t, o));
      if (lane == 0) sh.part_i[slot_d] = static_cast<int32_t>(t);
    }
    Publish();
    uint32_t m = UINT32_MAX;
    for (int r = 0; r < ranks; ++r) {
      m = min(m, static_cast<uint32_t>(cluster.map_shared_rank(sh.part_i, r)[slot_d]));
    }
    slot_d ^= 1;
    return m;
  }

  // The first in candidate order of the (value, id) every thread offers.
  __device__ void First(float& v, int32_t& id) {
    WarpFirst(v, id);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh.warp_f[warp] = v, sh.warp_i[warp] = id;
    __syncthreads();
    if (warp == 0) {
      float t = lane < kWarps ? sh.warp_f[lane] : -INFINITY;
      int32_t ti = lane < kWarps ? sh.warp_i[lane] : INT_MAX;
      WarpFirst(t, ti);
      if (lane == 0) sh.part_f[slot_d] = t, sh.part_i[slot_d] = ti;
    }
    Publish();
    v = -INFINITY, id = INT_MAX;
    for (int r = 0; r < ranks; ++r) {
      const float ov = cluster.map_shared_rank(sh.part_f, r)[slot_d];
      const int32_t oi = cluster.map_shared_rank(sh.part_i, r)[slot_d];
      if (Before(ov, oi, v, id)) v = ov, id = oi;
    }
    slot_d ^= 1;
  }

  // The first (with `last`, the last) element of `c` in candidate order; its value in *value.
  __device__ int32_t Extreme(const Cut& c, bool last, float* value = nullptr) {
    float v = last ? INFINITY : -INFINITY;
    int32_t id = last ? -1 : INT_MAX;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const uint32_t k = keys[j];
      const int32_t i = Id(j);
      if (!In(k, i, c)) continue;
      const float x = FromKey(k);
      if (last ? Before(-x, -i, -v, -id) : Before(x, i, v, id)) v = x, id = i;
    }
    if (last) {
      float nv = -v;
      int32_t nid = -id;
      First(nv, nid);
      if (value != nullptr) *value = -nv;
      return -nid;
    }
    First(v, id);
    if (value != nullptr) *value = v;
    return id;
  }

  __device__ double MassIn(const Cut& c) {
    double s = 0;
    for (int j = threadIdx.x; j < n; j += kThreads) {
      const uint32_t k = keys[j];
      if (In(k, Id(j), c)) s += Mass(FromKey(k));
    }
    return Sum(s);
  }

  // Select of the one-block kernel over the cluster's slices.
  __device__ bool Select(const Cut& within, bool count, double target, bool strict, Cut* out) {
    auto crosses = [&](double acc) { return strict ? acc > target : acc >= target; };
    if (threadIdx.x == 0) sh.before = 0, sh.prefix = 0;
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      // Counts go to an integer histogram (one atomic per distinct bin per warp, no rounds);
      // their sums in double are exact, so the totals are the same as with doubles.
      double* hist = sh.hist[slot_h];
      uint32_t* counts = sh.count[slot_h];
      for (int b = threadIdx.x; b < 256; b += kThreads) hist[b] = 0, counts[b] = 0;
      __syncthreads();
      const uint32_t prefix = sh.prefix;
      for (int base = 0; base < n; base += kThreads) {
        const int j = base + threadIdx.x;
        bool active = false;
        uint32_t bin = 0;
        double w = 0;
        if (j < n) {
          const uint32_t k = keys[j];
          if ((k & mask) == prefix && In(k, Id(j), within)) {
            active = true;
            bin = (k >> shift) & 255u;
            if (!count) w = Mass(FromKey(k));
          }
        }
        if (count) {
          CountToBins(counts, active, bin);
        } else {
          AddToBins(hist, active, bin, w);
        }
      }
      Publish();  // every CTA's histogram is complete
      for (int b = threadIdx.x; b < 256; b += kThreads) {
        double t = 0;
        for (int r = 0; r < ranks; ++r) {
          t += count ? static_cast<double>(cluster.map_shared_rank(sh.count[slot_h], r)[b])
                     : cluster.map_shared_rank(sh.hist[slot_h], r)[b];
        }
        sh.total[b] = t;
      }
      slot_h ^= 1;
      __syncthreads();
      if (threadIdx.x == 0) {
        sh.found = TakeCrossingBin(sh.total, crosses, shift, prefix, &sh.before, &sh.prefix);
      }
      __syncthreads();
      if (!sh.found) return false;  // the same in every CTA: they summed the same totals
      mask |= 255u << shift;
    }
    // Ties at the key found, in id order: each thread sums one contiguous chunk of the slice,
    // the CTAs' sums follow in rank order.
    const uint32_t key = sh.prefix;
    const double before = sh.before;
    const int chunk = Chunk();
    const int jlo = threadIdx.x * chunk, jhi = min(n, jlo + chunk);
    double mine = 0;
    for (int j = jlo; j < jhi; ++j) {
      if (keys[j] == key && In(key, Id(j), within)) mine += count ? 1.0 : Mass(FromKey(key));
    }
    const double in_cta = BlockExclusive(mine);
    double acc = before + RanksBelow(in_cta + mine) + in_cta;
    int32_t tie = INT_MAX;
    if (!crosses(acc) && crosses(acc + mine)) {
      for (int j = jlo; j < jhi; ++j) {
        if (keys[j] != key || !In(key, Id(j), within)) continue;
        acc += count ? 1.0 : Mass(FromKey(key));
        if (crosses(acc)) {
          tie = Id(j);
          break;
        }
      }
    }
    const uint32_t found = Min(static_cast<uint32_t>(tie));
    if (found == static_cast<uint32_t>(INT_MAX)) return false;  // rounding: no crossing
    *out = Cut{key, static_cast<int32_t>(found)};
    return true;
  }

  // A small cut's elements in one CTA: copies the elements inside `keep` into rank 0's gather
  // buffer in id order (each CTA's own in id order, the CTAs in rank order) when there are at
  // most kMaxGather of them. Rank 0's slice then becomes that buffer and it exchanges with
  // itself alone; the other CTAs get ranks = 0 and must leave without touching rank 0's shared
  // memory again (nothing reads theirs after this). Returns false, changing nothing, when the
  // cut is larger (the same answer in every CTA).
  __device__ bool Gather(const Cut& keep) {
    const int chunk = Chunk();
    const int jlo = threadIdx.x * chunk, jhi = min(n, jlo + chunk);
    double mine = 0;  // counts, exact in double
    for (int j = jlo; j < jhi; ++j) mine += In(keys[j], lo + j, keep) ? 1.0 : 0.0;
    const double in_cta = BlockExclusive(mine);
    if (threadIdx.x == kThreads - 1) sh.part_d[slot_d] = in_cta + mine;
    cluster.sync();
    double below = 0, total = 0;
    for (int r = 0; r < kCtas; ++r) {
      const double c = cluster.map_shared_rank(sh.part_d, r)[slot_d];
      if (r < rank) below += c;
      total += c;
    }
    slot_d ^= 1;
    if (total > kMaxGather) return false;
    uint32_t* to_keys = cluster.map_shared_rank(sh.gather_keys, 0);
    int32_t* to_ids = cluster.map_shared_rank(sh.gather_ids, 0);
    int at = static_cast<int>(below + in_cta);
    for (int j = jlo; j < jhi; ++j) {
      if (!In(keys[j], lo + j, keep)) continue;
      to_keys[at] = keys[j];
      to_ids[at] = lo + j;
      ++at;
    }
    cluster.sync();  // rank 0's buffer is complete
    if (rank == 0) {
      keys = sh.gather_keys;
      ids = sh.gather_ids;
      n = static_cast<int>(total);
      ranks = 1;
    } else {
      ranks = 0;
    }
    return true;
  }

  // Exclusive prefix sum of `v` over this CTA in thread order.
  __device__ double BlockExclusive(double v) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double incl = v;
    for (int o = 1; o < 32; o <<= 1) {
      const double up = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += up;
    }
    __syncthreads();  // warp_d may still be read by an earlier reduction's warp 0
    if (lane == 31) sh.warp_d[warp] = incl;
    __syncthreads();
    double below = 0;
    for (int w = 0; w < warp; ++w) below += sh.warp_d[w];
    return below + incl - v;
  }
};

// Loads ids [lo, lo + n) of a row as keys: of x / temperature (temperature > 0) or of x.
template <int kThreads, typename T>
__device__ void LoadKeys(const T* data, float temperature, Slice<kThreads>& s) {
  auto key = [temperature](float v) {
    return Key(temperature > 0.0f ? __fdiv_rn(v, temperature) : v);
  };
  int j0 = 0;
  if constexpr (std::is_same_v<T, bf16>) {
    if (reinterpret_cast<uintptr_t>(data + s.lo) % 16 == 0) {
      const uint4* p = reinterpret_cast<const uint4*>(data + s.lo);
      const int chunks = s.n / 8;
      constexpr int kLoads = 2;
      for (int base = threadIdx.x; base < chunks; base += kThreads * kLoads) {
        uint4 w[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int c = base + u * kThreads;
          w[u] = c < chunks ? p[c] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
          const int c = base + u * kThreads;
          if (c >= chunks) break;
          const bf16* e = reinterpret_cast<const bf16*>(&w[u]);
#pragma unroll
          for (int k = 0; k < 8; ++k) s.keys[c * 8 + k] = key(__bfloat162float(e[k]));
        }
      }
      j0 = chunks * 8;
    }
  }
  for (int j = j0 + threadIdx.x; j < s.n; j += kThreads) s.keys[j] = key(Load(data, s.lo + j));
  __syncthreads();
}

// Draw of the one-block kernel, over the slices (keys of x / temperature loaded). With
// `gather`, a top-k cut of at most kMaxGather elements is gathered into rank 0, which draws
// alone while the other CTAs leave (s.ranks == 0 in them; their return value is not an id).
template <int kThreads>
__device__ int32_t Draw(const strata_sample_params& p, int64_t vocab, bool gather,
                        Slice<kThreads>& s) {
  const Cut all;
  Cut keep = all;
  // A count select needs no masses, so the largest x is found after the top-k cut, over the
  // gathered ids when they are gathered (the cut holds the row's first element).
  if (p.top_k > 0 && p.top_k < vocab && s.Select(all, true, p.top_k, false, &keep) && gather &&
      p.top_k <= kMaxGather && s.Gather(keep) && s.ranks == 0) {
    return -1;
  }
  float max = 0;
  s.Extreme(all, false, &max);
  s.max = max;
  const double total = s.MassIn(keep);
  const Cut counted = keep;
  if (p.top_p < 1.0f) {
    Cut c;
    if (s.Select(keep, false, static_cast<double>(p.top_p) * total, false, &c)) keep = c;
  }
  if (p.min_p > 0.0f) {
    const double threshold = static_cast<double>(p.min_p) * (1.0 / total);
    uint32_t lowest = UINT32_MAX;
    for (int j = threadIdx.x; j < s.n; j += kThreads) {
      const uint32_t k = s.keys[j];
      if (In(k, s.Id(j), keep) && s.Mass(FromKey(k)) / total >= threshold) lowest = min(lowest, k);
    }
    lowest = s.Min(lowest);
    if (lowest > keep.key) keep = Cut{lowest, INT_MAX};
  }
  // (the same sum again when neither cut moved)
  const bool moved = keep.key != counted.key || keep.id != counted.id;
  const double kept = moved ? s.MassIn(keep) : total;
  Cut at;
  if (s.Select(keep, false, p.uniform * kept, true, &at)) return at.id;
  return s.Extreme(keep, true);
}

// Logprobs of the one-block kernel over the slices (raw keys loaded); rank 0 writes.
template <int kThreads, typename T>
__device__ void Logprobs(const T* data, int32_t token, int count, float* lp, int32_t* top,
                         Slice<kThreads>& s) {
  float max = 0;
  s.Extreme(Cut{}, false, &max);
  double e = 0;
  for (int j = threadIdx.x; j < s.n; j += kThreads) {
    e += exp(static_cast<double>(FromKey(s.keys[j]) - max));
  }
  const double sum = s.Sum(e);
  const float log_z = max + static_cast<float>(log(sum));
  const bool writer = s.rank == 0 && threadIdx.x == 0;
  if (writer) lp[0] = Load(data, token) - log_z;
  float pv = INFINITY;
  int32_t pid = -1;
  for (int q = 0; q < count; ++q) {
    float v = -INFINITY;
    int32_t id = INT_MAX;
    for (int j = threadIdx.x; j < s.n; j += kThreads) {
      const float x = FromKey(s.keys[j]);
      const int32_t i = s.lo + j;
      if (Before(pv, pid, x, i) && Before(x, i, v, id)) v = x, id = i;
    }
    s.First(v, id);
    if (writer) lp[1 + q] = v - log_z, top[q] = id;
    pv = v, pid = id;
  }
}

// kThreads: 1,024 while the clusters fit the GPU in one wave (a few rows: more warps hide the
// latency of each CTA's passes); 512 (two CTAs per SM) for more rows, where the GPU is full and
// fewer threads per CTA spend less on barriers and reductions. <= 64 registers either way.
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads, kThreads >= 1024 ? 1 : 2)
    SampleClusterKernel(const T* logits, int64_t stride, int64_t vocab, int slice,
                        const strata_sample_params* params, int32_t* tokens, float* logprobs,
                        int64_t lp_stride, int32_t* top_ids, int64_t top_stride) {
  __shared__ Shared sh;
  extern __shared__ uint32_t keys[];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / kCtas;
  const int32_t lo = rank * slice;
  const int64_t left = vocab - lo;
  const int n = static_cast<int>(left < 0 ? 0 : (left < slice ? left : slice));
  Slice<kThreads> s{cluster, sh, keys, rank, lo, n};
  WaitForPrerequisites();  // the logits (programmatic dependent launch)
  AllowDependents();
  const T* data = logits + r * stride;
  const strata_sample_params p = Clamped(params[r]);
  const bool want_logprobs = logprobs != nullptr && top_ids != nullptr;
  // The one-block kernel before this one took the plain greedy rows (the same in every CTA of
  // the cluster: they leave together, before any exchange).
  if (!ClusterRow(p, want_logprobs)) return;
  LoadKeys(data, p.temperature, s);
  const bool with_logprobs = p.num_logprobs >= 0 && want_logprobs;
  // (logprobs need every CTA's slice again, so such rows keep the cluster to the end)
  const int32_t token =
      p.temperature == 0.0f ? s.Extreme(Cut{}, false) : Draw(p, vocab, !with_logprobs, s);
  if (s.ranks == 0) return;  // rank 0 drew alone (Gather)
  if (rank == 0 && threadIdx.x == 0) tokens[r] = token;
  if (with_logprobs) {
    if (p.temperature > 0.0f) {
      __syncthreads();  // (the draw's last exchange already kept its readers of keys apart)
      LoadKeys(data, 0.0f, s);
    }
    const int64_t count = min(p.num_logprobs, STRATA_MAX_LOGPROBS);
    Logprobs(data, token, static_cast<int>(count < vocab ? count : vocab), logprobs + r * lp_stride,
             top_ids + r * top_stride, s);
  }
  // No CTA leaves while another may still read its shared memory (after a Gather nothing reads
  // another CTA's).
  if (s.ranks > 1) cluster.sync();
}

}  // namespace cl

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

// The cluster kernel over `rows` rows, kThreads threads per CTA, with programmatic dependent
// launch (it waits for the one-block kernel launched just before it).
template <typename T, int kThreads>
cudaError_t LaunchCluster(const T* logits, int64_t stride, int64_t rows, int64_t vocab, int slice,
                          const strata_sample_params* params, int32_t* tokens, float* logprobs,
                          int64_t lp_stride, int32_t* top_ids, int64_t top_stride,
                          cudaStream_t stream) {
  // One limit for every launch (the attribute is set once per kernel).
  constexpr int kSmemLimit = static_cast<int>(cl::kMaxSlice * sizeof(uint32_t));
  cudaError_t err = AllowDynamicSmem<cl::SampleClusterKernel<T, kThreads>>(kSmemLimit);
  if (err != cudaSuccess) return err;
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = cl::kCtas;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows * cl::kCtas));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(slice) * sizeof(uint32_t);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, cl::SampleClusterKernel<T, kThreads>, logits, stride, vocab,
                            slice, params, tokens, logprobs, lp_stride, top_ids, top_stride);
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
  const int64_t slice = ((vocab + cl::kCtas - 1) / cl::kCtas + 7) / 8 * 8;
  if (STRATA_SAMPLE_CLUSTER && slice <= cl::kMaxSlice && rows <= INT32_MAX / cl::kCtas) {
    cudaError_t err = LaunchOneBlock(logits, f32, stride, rows, vocab, params, tokens, logprobs,
                                     lp_stride, top_ids, top_stride, /*plain_only=*/true, stream);
    if (err != cudaSuccess) return err;
    const int slice32 = static_cast<int>(slice);
    // One wave of single-CTA SMs: 1,024 threads; more rows: 512 (two CTAs per SM).
    const bool wide = rows * cl::kCtas <= SmCount();
    if (f32) {
      const auto* x = static_cast<const float*>(logits);
      return wide ? LaunchCluster<float, 1024>(x, stride, rows, vocab, slice32, params, tokens,
                                               logprobs, lp_stride, top_ids, top_stride, stream)
                  : LaunchCluster<float, 512>(x, stride, rows, vocab, slice32, params, tokens,
                                              logprobs, lp_stride, top_ids, top_stride, stream);
    }
    const auto* x = static_cast<const bf16*>(logits);
    return wide ? LaunchCluster<bf16, 1024>(x, stride, rows, vocab, slice32, params, tokens,
                                            logprobs, lp_stride, top_ids, top_stride, stream)
                : LaunchCluster<bf16, 512>(x, stride, rows, vocab, slice32, params, tokens,
                                           logprobs, lp_stride, top_ids, top_stride, stream);
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
