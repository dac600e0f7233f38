// On-device sampling, the cluster path: a row that draws or wants logprobs on a thread-block
// cluster of 8 CTAs that keep the row in shared memory (the rule: kernels_sample_rule.cuh).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels_sample_rule.cuh"

namespace strata::cuda {
namespace {

// The cluster path: one row per thread-block cluster of kCtas CTAs. CTA `rank` owns ids
// [rank * slice, (rank + 1) * slice) and keeps their orderable keys in shared memory, loaded
// once; every pass of the rule (the radix selects, the mass sums, the extremes) then reads
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
      const int chunks = s.n / 8;
      ForEachChunk<kThreads, 2>(reinterpret_cast<const uint4*>(data + s.lo), chunks,
                                [&](int32_t c, const bf16* e) {
#pragma unroll
                                  for (int k = 0; k < 8; ++k) {
                                    s.keys[c * 8 + k] = key(__bfloat162float(e[k]));
                                  }
                                });
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

// Ids per CTA: an eighth of the row, rounded up to whole 16-byte chunks of bf16.
int64_t SliceOf(int64_t vocab) { return ((vocab + cl::kCtas - 1) / cl::kCtas + 7) / 8 * 8; }

}  // namespace

bool SampleClusterFits(int64_t rows, int64_t vocab) {
  return SliceOf(vocab) <= cl::kMaxSlice && rows <= INT32_MAX / cl::kCtas;
}

cudaError_t LaunchSampleCluster(const void* logits, bool f32, int64_t stride, int64_t rows,
                                int64_t vocab, const strata_sample_params* params, int32_t* tokens,
                                float* logprobs, int64_t lp_stride, int32_t* top_ids,
                                int64_t top_stride, cudaStream_t stream) {
  const int slice = static_cast<int>(SliceOf(vocab));
  // One wave of single-CTA SMs: 1,024 threads; more rows: 512 (two CTAs per SM).
  const bool wide = rows * cl::kCtas <= SmCount();
  if (f32) {
    const auto* x = static_cast<const float*>(logits);
    return wide ? LaunchCluster<float, 1024>(x, stride, rows, vocab, slice, params, tokens,
                                             logprobs, lp_stride, top_ids, top_stride, stream)
                : LaunchCluster<float, 512>(x, stride, rows, vocab, slice, params, tokens, logprobs,
                                            lp_stride, top_ids, top_stride, stream);
  }
  const auto* x = static_cast<const bf16*>(logits);
  return wide ? LaunchCluster<bf16, 1024>(x, stride, rows, vocab, slice, params, tokens, logprobs,
                                          lp_stride, top_ids, top_stride, stream)
              : LaunchCluster<bf16, 512>(x, stride, rows, vocab, slice, params, tokens, logprobs,
                                         lp_stride, top_ids, top_stride, stream);
}

}  // namespace strata::cuda
