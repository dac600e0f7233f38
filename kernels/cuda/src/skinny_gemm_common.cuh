// What the decode-sized dense GEMM kernels share (kernels_skinny_gemm.cu: mma.sync, any sm_90
// device; kernels_skinny_gemm_sm90a.cu: wgmma, Hopper only): the arguments, the cp.async
// loader (x rows and weight rows into the MoE GEMMs' swizzled 128-byte tile rows), the output
// rounding (gemm, or silu_mul of the rounded gate and up values), the split-K reduction across
// a thread-block cluster and the launch. Device code and launch templates; included by .cu
// files only.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "moe_gemm_common.cuh"

namespace strata::cuda::skinny {

using moe::kBK;
using moe::Swizzle;

constexpr int kMaxSplits = 8;         // the portable cluster size
constexpr int kMinTilesPerSplit = 4;  // K tiles per CTA at least (pipeline fill amortized)

struct SkinnyArgs {
  const bf16* x;
  int64_t ldx;
  int m;
  const bf16* w;
  int64_t ldw;
  int n;  // output columns (silu: I, gate rows [0, I) and up rows [I, 2I) of w)
  int k;
  const bf16* bias;  // [n] ([2I] with silu); may be null
  bool accumulate;   // P = 1 only
  bf16* out;
  int64_t ldo;
  int splits;          // CTAs per cluster along K
  bool early_weights;  // w is not written by the predecessor: its first stages stream early
};

// A CTA's copy sources: thread t copies 16-byte chunk (t & 7) of tile rows (t >> 3) + i *
// kRowStep. Rows past M or N and chunks past K are zero-filled.
template <typename T>
struct DenseLoader {
  static constexpr int kRowStep = T::kThreads / 8;
  const bf16* a;        // x row (t >> 3), chunk (t & 7)
  int64_t a_step;       // kRowStep rows of x
  int a_rows_left;      // M - (t >> 3)
  const bf16* b;        // weight row n0 + (t >> 3) of the first part, chunk (t & 7)
  int64_t b_step;       // kRowStep rows of w
  int64_t part_stride;  // a gate row to its up row
  int b_rows_left;      // N - n0 - (t >> 3)
  int k_left;           // K - 8 (t & 7)
  const bf16* any;      // an address for zero-filled copies (not read)

  __device__ void Init(const SkinnyArgs& g, int n0) {
    const int r0 = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    a = g.x + r0 * g.ldx + chunk * 8;
    a_step = kRowStep * g.ldx;
    a_rows_left = g.m - r0;
    b = g.w + static_cast<int64_t>(n0 + r0) * g.ldw + chunk * 8;
    b_step = kRowStep * g.ldw;
    part_stride = static_cast<int64_t>(g.n) * g.ldw;
    b_rows_left = g.n - n0 - r0;
    k_left = g.k - chunk * 8;
    any = g.w;
  }

  __device__ void Load(uint32_t smem, int stage, int k0, bool load_a = true,
                       bool load_b = true) const {
    const uint32_t a_smem = smem + stage * T::kStageBytes, b_smem = a_smem + T::BM * 128;
    const int r0 = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    const bool k_ok = k0 < k_left;
    if (load_a) {
#pragma unroll
      for (int i = 0; i < T::BM / kRowStep; ++i) {
        const bool ok = k_ok && i * kRowStep < a_rows_left;
        CopyAsync16(a_smem + Swizzle(r0 + i * kRowStep, chunk), ok ? a + i * a_step + k0 : any, ok);
      }
    }
    if (load_b) {
#pragma unroll
      for (int i = 0; i < T::kBRows / kRowStep; ++i) {
        const int part = (i * kRowStep) / T::BN;  // uniform per i: kRowStep divides BN
        const int ri = i - part * (T::BN / kRowStep);
        const bool ok = k_ok && ri * kRowStep < b_rows_left;
        CopyAsync16(b_smem + Swizzle(r0 + i * kRowStep, chunk),
                    ok ? b + part * part_stride + ri * b_step + k0 : any, ok);
      }
    }
  }
};

// Output (row, col) from its fp32 sum(s): P = 1 the gemm's value, P = 2 silu_mul of the
// rounded gate and up values.
template <int P>
__device__ __forceinline__ void StoreOut(const SkinnyArgs& g, int row, int col, float v0,
                                         float v1) {
  bf16* o = g.out + row * g.ldo + col;
  if constexpr (P == 1) {
    const float bias = g.bias != nullptr ? __bfloat162float(g.bias[col]) : 0.0f;
    const float base = g.accumulate ? __bfloat162float(*o) : 0.0f;
    *o = __float2bfloat16(base + v0 + bias);
  } else {
    const float bg = g.bias != nullptr ? __bfloat162float(g.bias[col]) : 0.0f;
    const float bu = g.bias != nullptr ? __bfloat162float(g.bias[col + g.n]) : 0.0f;
    const float gate = __bfloat162float(__float2bfloat16(v0 + bg));
    const float up = __bfloat162float(__float2bfloat16(v1 + bu));
    *o = __float2bfloat16(gate / (1.0f + expf(-gate)) * up);
  }
}

template <typename T>
inline constexpr int kPartialLd =
    T::P* T::BN + 8;  // floats per partial row (+8: no bank conflicts)

// A CTA's share of the grid: column tile n0 and K tiles [kt0, kt0 + tiles) of split `split`
// (a cluster's CTAs are consecutive, so the split is the CTA's rank in its cluster).
struct CtaSlice {
  int split, n0, kt0, tiles;
};

// How every skinny kernel starts: its slice, the loader, then the ring's first STAGES - 1
// stages: x (and out when accumulating) may come from the predecessor, so their copies wait for
// it; the weights' copies too unless early_weights (moe::Prologue).
template <typename T>
__device__ CtaSlice StartCta(const SkinnyArgs& g, uint32_t smem, DenseLoader<T>* loader) {
  CtaSlice c;
  c.split = static_cast<int>(blockIdx.x) % g.splits;
  c.n0 = static_cast<int>(blockIdx.x) / g.splits * T::BN;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  c.kt0 = c.split * k_tiles / g.splits;
  c.tiles = (c.split + 1) * k_tiles / g.splits - c.kt0;
  loader->Init(g, c.n0);
  if (!g.early_weights) {
    WaitForPrerequisites();
    AllowDependents();
  }
  moe::Prologue<T>(*loader, smem, c.tiles, g.early_weights, c.kt0);
  return c;
}

// Split K, after every CTA of the cluster has written its BM x P BN fp32 partial tile (rows
// kPartialLd<T> floats apart) at `partial` in its own shared memory: each CTA sums a 1 / splits
// share of the tile's outputs over all the partials, read through distributed shared memory in
// rank order (the same sum on every run), and writes them.
template <typename T>
__device__ void ReduceSplits(const SkinnyArgs& g, float* partial, int split, int n0) {
  namespace cg = cooperative_groups;
  constexpr int kLd = kPartialLd<T>;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every partial written (and visible across the cluster)
  const int rows = min(T::BM, g.m), cols = min(T::BN, g.n - n0);
  constexpr int kPairs = T::BN / 2;  // column pairs per row
  const int total = rows * kPairs, share = (total + g.splits - 1) / g.splits;
  const int e_end = min(total, (split + 1) * share);
  for (int e = split * share + static_cast<int>(threadIdx.x); e < e_end; e += T::kThreads) {
    const int row = e / kPairs, col = (e - row * kPairs) * 2;
    if (col >= cols) continue;
    float2 sum[T::P];
#pragma unroll
    for (int p = 0; p < T::P; ++p) sum[p] = make_float2(0.0f, 0.0f);
    for (int r = 0; r < g.splits; ++r) {  // rank order: the same sum on every run
      const float* src = cluster.map_shared_rank(partial, r) + row * kLd + col;
#pragma unroll
      for (int p = 0; p < T::P; ++p) {
        const float2 v = *reinterpret_cast<const float2*>(src + p * T::BN);
        sum[p].x += v.x;
        sum[p].y += v.y;
      }
    }
    StoreOut<T::P>(g, row, n0 + col, sum[0].x, sum[T::P - 1].x);
    if (col + 1 < cols) StoreOut<T::P>(g, row, n0 + col + 1, sum[0].y, sum[T::P - 1].y);
  }
  cluster.sync();  // no CTA leaves while another still reads its partial
}

// Clusters of `splits` CTAs of kernel K the device co-schedules (cached per device and size).
template <auto kKernel>
int MaxActiveClusters(int splits, int threads, int shared) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices][kMaxSplits + 1];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int c = cached[device][splits].load(std::memory_order_relaxed);
    if (c > 0) return c;
  }
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = splits;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(splits);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return 0;
  }
  if (cacheable && clusters > 0) cached[device][splits].store(clusters, std::memory_order_relaxed);
  return clusters;
}

// Launches kKernel (tile T, `shared` bytes of dynamic shared memory) over the column tiles of
// g.n, K split over as many CTAs per cluster as one wave of CTAs allows (at most kMaxSplits, at
// least kMinTilesPerSplit K tiles each, and no more than the device co-schedules), with
// programmatic dependent launch.
template <typename T, auto kKernel>
cudaError_t LaunchSplitK(SkinnyArgs g, int shared, cudaStream_t stream) {
  static_assert(T::BM * kPartialLd<T> * 4 <= T::kSharedBytes, "the partial tile fits in the ring");
  cudaError_t err = AllowDynamicSmem<kKernel>(shared);
  if (err != cudaSuccess) return err;
  const int n_tiles = (g.n + T::BN - 1) / T::BN, k_tiles = (g.k + kBK - 1) / kBK;
  const int slots = SmCount() * T::kMinBlocks;
  int splits = std::clamp(slots / n_tiles, 1,
                          std::max(1, std::min(kMaxSplits, k_tiles / kMinTilesPerSplit)));
  while (splits > 1 && MaxActiveClusters<kKernel>(splits, T::kThreads, shared) < n_tiles) {
    --splits;
  }
  g.splits = splits;
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = 1;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = splits;
  attrs[1].val.clusterDim.y = 1;
  attrs[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(n_tiles * splits));
  config.blockDim = dim3(T::kThreads);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = splits > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kKernel, g);
}

// The wgmma kernel (kernels_skinny_gemm_sm90a.cu) for BM = 64; only where WgmmaAvailable().
cudaError_t LaunchSkinnyWgmma(const SkinnyArgs& g, bool silu, cudaStream_t stream);
// gemm_silu_mul at 33-64 rows with more than kMaxServedTiles tiles: 8 stages, one CTA per SM.
cudaError_t LaunchSkinnyWgmmaDeepSilu(const SkinnyArgs& g, cudaStream_t stream);

}  // namespace strata::cuda::skinny
