// moe_experts on the device, without a host round trip:
//
//   1. MoeSortKernel (one CTA): counting sort of the T * k (token, j) assignments by expert:
//      per-warp histograms over contiguous segments, one scan, then a stable scatter (warps
//      walk their segments in order, ranks inside a 32-wide step from __match_any_sync), so
//      the order is token order within each expert, the same on every run. It also writes the
//      m-tile table of the grouped GEMMs: tile i covers rows [row[i], row[i] + BM) of expert
//      expert[i]'s slots. An id outside [0, E) goes to a trailing bucket no GEMM reads.
//   2. GroupedGemmKernel<gate_up>: act[slot] = silu(x[token[slot]] Wg^T) * (x[token[slot]] Wu^T)
//      with the row gather fused into the A-tile loads and SiLU * up fused into the epilogue
//      (each CTA holds the gate and the up columns of the same output columns).
//   3. GroupedGemmKernel<down>: y[slot] = act[slot] Wd^T (bf16).
//   4. MoeCombineKernel: out[t] = sum_j w[t, j] * y[inv[t, j]] in fp32, j in order.
//
// The GEMMs are bf16 mma.sync.m16n8k16 with fp32 accumulation, a STAGES-deep cp.async ring of
// BK = 64 tiles, shared-memory rows XOR-swizzled by (row & 7) so every ldmatrix phase is
// conflict-free. The grid is sized on the host from T * k and E alone (an upper bound on the
// m-tiles); CTAs past the real tile count exit at once. Three tile shapes by rows per expert:
// small (BM 16, deep rings) for decode-sized groups, which are weight-bandwidth bound, medium
// (BM 32), and large (BM 128, 64 x 64 warp tiles) for prefill-sized groups, which are compute
// bound; on compute capability 9.0 devices the large tiles run the wgmma kernel of
// kernels_moe_experts_sm90a.cu instead, on the same tile table). The kernels use programmatic
// dependent launch (see WaitForPrerequisites; not the large tiles' GEMMs); the down GEMM
// streams its first weight stages before the gate_up GEMM has finished.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "moe_gemm_common.cuh"

// Bench variants only (built by hand, like STRATA_PREFILL_*): -DSTRATA_MOE_PDL=0 launches
// without programmatic dependent launch; STRATA_MOE_SMALL_GATE_UP / _DOWN replace the small
// tiles' Tile<...> arguments. The plugin uses the defaults.
#ifndef STRATA_MOE_PDL
#define STRATA_MOE_PDL 1
#endif

namespace strata::cuda {
namespace {

using namespace moe;  // NOLINT(google-build-using-namespace): the shared GEMM parts

constexpr int kSortThreads = 1024;  // the sort kernel's one CTA
constexpr int kSortSharedBytes = 96 * 1024;

// ---- 1. counting sort ---------------------------------------------------------------------

struct SortArgs {
  const int32_t* ids;
  int64_t ids_stride;
  int32_t rows, top_k, experts, block_m;
  int32_t warps;         // warps that own a segment; hist holds warps x (experts + 1) counters
  int32_t* offsets;      // [experts + 2]: slots of expert e are [offsets[e], offsets[e + 1])
  int32_t* tile_expert;  // [max_tiles]
  int32_t* tile_row;     // [max_tiles]
  int32_t* num_tiles;    // [1]
  int32_t* slot_token;   // [n]: token of each sorted slot
  int32_t* inv;          // [n]: slot of assignment a = t * top_k + j
};

__device__ int Bucket(const SortArgs& a, int32_t idx) {
  const int32_t t = idx / a.top_k, j = idx - t * a.top_k;
  const int32_t e = a.ids[t * a.ids_stride + j];
  return e >= 0 && e < a.experts ? e : a.experts;
}

// Exclusive block-wide scan of two values per thread (kSortThreads threads); returns the
// totals through *total_x / *total_y. `scratch` holds 2 * 32 ints.
__device__ void BlockScan2(int* x, int* y, int* total_x, int* total_y, int* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int sx = *x, sy = *y;
  for (int o = 1; o < 32; o <<= 1) {
    const int px = __shfl_up_sync(0xffffffffu, sx, o), py = __shfl_up_sync(0xffffffffu, sy, o);
    if (lane >= o) sx += px, sy += py;
  }
  if (lane == 31) scratch[warp] = sx, scratch[32 + warp] = sy;
  __syncthreads();
  if (warp == 0) {
    int wx = scratch[lane], wy = scratch[32 + lane];
    for (int o = 1; o < 32; o <<= 1) {
      const int px = __shfl_up_sync(0xffffffffu, wx, o), py = __shfl_up_sync(0xffffffffu, wy, o);
      if (lane >= o) wx += px, wy += py;
    }
    scratch[lane] = wx, scratch[32 + lane] = wy;
  }
  __syncthreads();
  const int base_x = warp > 0 ? scratch[warp - 1] : 0, base_y = warp > 0 ? scratch[31 + warp] : 0;
  *x = base_x + sx - *x;
  *y = base_y + sy - *y;
  *total_x = scratch[31];
  *total_y = scratch[63];
}

// Writes expert e's m-tiles to the tile table, from tile index `tile`.
__device__ void WriteTiles(const SortArgs& a, int e, int slot, int count, int tile) {
  for (int r = 0; r < count; r += a.block_m, ++tile) {
    a.tile_expert[tile] = e;
    a.tile_row[tile] = slot + r;
  }
}

__global__ void __launch_bounds__(kSortThreads) MoeSortKernel(SortArgs a) {
  extern __shared__ int hist[];  // [warps][buckets] counters, then [buckets] totals
  __shared__ int scan_scratch[64];
  const int buckets = a.experts + 1, n = a.rows * a.top_k;
  int* totals = hist + a.warps * buckets;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seg = (n + a.warps - 1) / a.warps;
  const int seg_begin = min(n, warp * seg), seg_end = min(n, seg_begin + seg);
  for (int i = threadIdx.x; i < a.warps * buckets; i += kSortThreads) hist[i] = 0;
  WaitForPrerequisites();  // topk_ids, and the previous call's readers of the workspace
  AllowDependents();
  __syncthreads();
  if (warp < a.warps) {
    for (int i = seg_begin + lane; i < seg_end; i += 32) {
      atomicAdd(&hist[warp * buckets + Bucket(a, i)], 1);
    }
  }
  __syncthreads();
  // Each thread owns a contiguous run of buckets: per bucket, the counts of earlier warps
  // replace each warp's counter, the total and the m-tile count are summed for the scan.
  const int per = (buckets + kSortThreads - 1) / kSortThreads;
  const int b0 = min(buckets, static_cast<int>(threadIdx.x) * per), b1 = min(buckets, b0 + per);
  int slots = 0, tiles = 0;
  for (int b = b0; b < b1; ++b) {
    int total = 0;
    for (int w = 0; w < a.warps; ++w) {
      const int c = hist[w * buckets + b];
      hist[w * buckets + b] = total;
      total += c;
    }
    totals[b] = total;
    slots += total;
    if (b < a.experts) tiles += (total + a.block_m - 1) / a.block_m;
  }
  int all_slots = 0, all_tiles = 0;
  BlockScan2(&slots, &tiles, &all_slots, &all_tiles, scan_scratch);
  for (int b = b0; b < b1; ++b) {
    for (int w = 0; w < a.warps; ++w) hist[w * buckets + b] += slots;
    a.offsets[b] = slots;
    if (b < a.experts) {
      WriteTiles(a, b, slots, totals[b], tiles);
      tiles += (totals[b] + a.block_m - 1) / a.block_m;
    }
    slots += totals[b];
  }
  if (threadIdx.x == 0) {
    a.offsets[buckets] = all_slots;
    *a.num_tiles = all_tiles;
  }
  __syncthreads();
  // Stable scatter: each warp walks its segment 32 assignments at a time; lanes with the same
  // bucket rank by lane, the lowest of them advances the warp's cursor of that bucket.
  if (warp >= a.warps) return;
  for (int base = seg_begin; base < seg_end; base += 32) {
    const int i = base + lane;
    const bool valid = i < seg_end;
    const int b = valid ? Bucket(a, i) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, b);
    const int rank = __popc(peers & ((1u << lane) - 1));
    const int slot = valid ? hist[warp * buckets + b] + rank : 0;
    __syncwarp();
    if (valid && rank == 0) hist[warp * buckets + b] += __popc(peers);
    __syncwarp();
    if (valid) {
      a.slot_token[slot] = i / a.top_k;
      a.inv[i] = slot;
    }
  }
}

// ---- 2, 3. grouped GEMMs ------------------------------------------------------------------

// Writes the warp's accumulators: silu(gate) * up for P = 2, the value for P = 1.
template <typename T>
__device__ void Epilogue(const GemmArgs& g, int row0, int row_end, int n0, int warp_m, int warp_n,
                         const float (&acc)[T::P][T::kMI][T::kNI][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int mi = 0; mi < T::kMI; ++mi) {
#pragma unroll
    for (int ni = 0; ni < T::kNI; ++ni) {
      const int col = n0 + warp_n * (T::BN / T::WN) + ni * 8 + (lane & 3) * 2;
      if (col >= g.n) continue;  // n is even: col + 1 < n too
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int slot = row0 + warp_m * (T::BM / T::WM) + mi * 16 + (lane >> 2) + half * 8;
        if (slot >= row_end) continue;
        float v0 = acc[0][mi][ni][half * 2], v1 = acc[0][mi][ni][half * 2 + 1];
        if constexpr (T::P == 2) {
          v0 = Silu(v0) * acc[T::P - 1][mi][ni][half * 2];
          v1 = Silu(v1) * acc[T::P - 1][mi][ni][half * 2 + 1];
        }
        *reinterpret_cast<__nv_bfloat162*>(g.out + slot * g.out_stride + col) =
            __floats2bfloat162_rn(v0, v1);
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) GroupedGemmKernel(GemmArgs g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int64_t a_off[T::BM];
  const uint32_t smem = SmemAddress(smem_raw);
  const int warp = threadIdx.x >> 5, warp_m = warp / T::WN, warp_n = warp % T::WN;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  int tile, n_tile;
  MapCta<T>((g.n + T::BN - 1) / T::BN, &tile, &n_tile);
  // Without early_weights everything this kernel reads may come from its predecessor.
  if (!g.early_weights) WaitForPrerequisites(), AllowDependents();
  if (tile >= *g.num_tiles) {
    // Still ordered after the predecessor, so dependents never see this grid end before it.
    if (g.early_weights) WaitForPrerequisites(), AllowDependents();
    return;
  }
  const int n0 = n_tile * T::BN;
  const int expert = g.tile_expert[tile], row0 = g.tile_row[tile];
  const int row_end = min(row0 + T::BM, g.offsets[expert + 1]);
  Loader<T> loader;
  loader.Init(g, a_off, expert, row0, row_end, n0);
  __syncthreads();
  Prologue<T>(loader, smem, k_tiles, g.early_weights);
  float acc[T::P][T::kMI][T::kNI][4] = {};
  for (int kt = 0; kt < k_tiles; ++kt) {
    WaitGroup<T::STAGES - 2>();
    __syncthreads();
    const int next = kt + T::STAGES - 1;
    if (next < k_tiles) loader.Load(smem, next % T::STAGES, next * kBK);
    CommitGroup();
    const uint32_t a_base = smem + (kt % T::STAGES) * T::kStageBytes;
    ComputeStage<T>(a_base, a_base + T::BM * 128, warp_m, warp_n, acc);
  }
  WaitGroup<0>();
  Epilogue<T>(g, row0, row_end, n0, warp_m, warp_n, acc);
}

// ---- 4. combine -------------------------------------------------------------------------

constexpr int kCombineThreads = 128;

// One CTA per token; each thread sums 8 columns at a time over the token's k assignments.
__global__ void __launch_bounds__(kCombineThreads)
    MoeCombineKernel(const bf16* y, int64_t hidden, const int32_t* inv, const int32_t* offsets,
                     int32_t experts, const float* weights, int64_t weights_stride, int32_t top_k,
                     bf16* out, int64_t out_stride) {
  const int64_t t = blockIdx.x;
  WaitForPrerequisites();
  AllowDependents();
  const int32_t valid_end = offsets[experts];
  for (int64_t c = threadIdx.x * 8; c < hidden; c += kCombineThreads * 8) {
    float acc[8] = {};
    for (int j = 0; j < top_k; ++j) {
      const int32_t slot = inv[t * top_k + j];
      if (slot >= valid_end) continue;  // an expert id outside [0, E): contributes nothing
      const float w = weights[t * weights_stride + j];
      const uint4 raw = *reinterpret_cast<const uint4*>(y + slot * hidden + c);
      const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(v[i]);
        acc[2 * i] += w * f.x;
        acc[2 * i + 1] += w * f.y;
      }
    }
    uint4 packed;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
    *reinterpret_cast<uint4*>(out + t * out_stride + c) = packed;
  }
}

// Prefill-sized groups: 128 x 128 x 64 tiles, 4 warps of 64 x 64 (4 mma per ldmatrix, the
// ratio that keeps shared memory off the critical path), 2 CTAs per SM.
using LargeGateUp = Tile<128, 64, 2, 2, 3, 2, 2, 8>;
using LargeDown = Tile<128, 128, 2, 2, 3, 1, 2, 8>;
// Decode-sized groups (< 16 rows per expert): weight-bandwidth bound. 16-row tiles and deep
// rings, so each SM keeps >= ~80 KiB of weights in flight (Little's law asks ~40 KiB at
// ~4.2 TB/s); 2 (gate_up) / 3 (down) CTAs per SM. The down tiles are 128 columns wide: with
// Qwen3-30B-A3B's K = 768 a 32-wide tile holds 48 KiB of weights, all pipeline fill and drain
// (moe_bench: plugins/cuda/NOTES.md).
#ifndef STRATA_MOE_SMALL_GATE_UP
#define STRATA_MOE_SMALL_GATE_UP 16, 32, 1, 4, 8, 2, 2, 4
#endif
#ifndef STRATA_MOE_SMALL_DOWN
#define STRATA_MOE_SMALL_DOWN 16, 128, 1, 4, 4, 1, 3, 4
#endif
using SmallGateUp = Tile<STRATA_MOE_SMALL_GATE_UP>;
using SmallDown = Tile<STRATA_MOE_SMALL_DOWN>;
// 16..63 rows per expert: 32-row tiles, 6 stages, 3 CTAs per SM.
using MediumGateUp = Tile<32, 32, 1, 4, 6, 2, 3, 4>;
using MediumDown = Tile<32, 32, 1, 4, 6, 1, 3, 4>;
static_assert(SmallGateUp::BM == SmallDown::BM && MediumGateUp::BM == MediumDown::BM &&
                  LargeGateUp::BM == LargeDown::BM && LargeGateUp::BM == kWgmmaTileM,
              "the two GEMMs of a call share one m-tile table");

// Largest expert count the sort kernel's shared memory holds with one warp per segment.
constexpr int64_t kMaxSortBuckets = kSortSharedBytes / 4 / 2;

// Warps that own a segment: about 64 assignments each (a decode call's few assignments need
// one warp, which keeps the per-bucket scan short), as many as the shared memory holds.
int SortWarps(int64_t experts, int64_t assignments) {
  const int64_t fit = kSortSharedBytes / 4 / (experts + 1) - 1;
  const int64_t want = (assignments + 63) / 64;
  return static_cast<int>(std::clamp<int64_t>(std::min(fit, want), 1, kSortThreads / 32));
}

size_t Align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace carve-up shared by the plan and the launch.
struct Layout {
  size_t offsets, tile_expert, tile_row, num_tiles, slot_token, inv, act, y, total;
};

Layout MakeLayout(const MoeExpertsArgs& m, int64_t max_tiles) {
  const int64_t n = m.rows * m.top_k;
  Layout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += Align256(bytes);
    return here;
  };
  l.offsets = take((m.experts + 2) * sizeof(int32_t));
  l.tile_expert = take(max_tiles * sizeof(int32_t));
  l.tile_row = take(max_tiles * sizeof(int32_t));
  l.num_tiles = take(sizeof(int32_t));
  l.slot_token = take(n * sizeof(int32_t));
  l.inv = take(n * sizeof(int32_t));
  l.act = take(n * m.inter * sizeof(bf16));
  l.y = take(n * m.hidden * sizeof(bf16));
  l.total = at;
  return l;
}

template <typename T>
cudaError_t LaunchGemm(const GemmArgs& g, int64_t max_tiles, cudaStream_t stream) {
  const cudaError_t err = AllowDynamicSmem<GroupedGemmKernel<T>>(T::kSharedBytes);
  if (err != cudaSuccess) return err;
  const int64_t n_tiles = (g.n + T::BN - 1) / T::BN;
  const int64_t m_slots = (max_tiles + T::GROUP_M - 1) / T::GROUP_M * T::GROUP_M;
  if (m_slots * n_tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(m_slots * n_tiles));
  return LaunchKernel(g.pdl && STRATA_MOE_PDL, GroupedGemmKernel<T>, grid, dim3(T::kThreads),
                      T::kSharedBytes, stream, g);
}

template <typename GateUp, typename Down>
cudaError_t LaunchGemms(const MoeExpertsArgs& m, const MoePlan& plan, char* ws, const Layout& l,
                        cudaStream_t stream) {
  GemmArgs g{};
  g.offsets = reinterpret_cast<const int32_t*>(ws + l.offsets);
  g.tile_expert = reinterpret_cast<const int32_t*>(ws + l.tile_expert);
  g.tile_row = reinterpret_cast<const int32_t*>(ws + l.tile_row);
  g.num_tiles = reinterpret_cast<const int32_t*>(ws + l.num_tiles);
  g.a = m.x;
  g.a_stride = m.x_stride;
  g.a_rows = reinterpret_cast<const int32_t*>(ws + l.slot_token);
  g.w = m.w_gate_up;
  g.w_expert_stride = m.gate_up_expert_stride;
  g.n = static_cast<int32_t>(m.inter);
  g.k = static_cast<int32_t>(m.hidden);
  g.experts = static_cast<int32_t>(m.experts);
  g.out = reinterpret_cast<bf16*>(ws + l.act);
  g.out_stride = m.inter;
  g.early_weights = false;
  g.pdl = plan.tiles != MoeTiles::kLarge;
  // Prefill-sized groups take the wgmma kernel where the device has it (same tile table).
  const bool wgmma = plan.tiles == MoeTiles::kLarge && WgmmaAvailable();
  cudaError_t err = wgmma ? LaunchGroupedGemmWgmma(g, plan.max_tiles, true, stream)
                          : LaunchGemm<GateUp>(g, plan.max_tiles, stream);
  if (err != cudaSuccess) return err;
  g.a = reinterpret_cast<const bf16*>(ws + l.act);
  g.a_stride = m.inter;
  g.a_rows = nullptr;
  g.w = m.w_down;
  g.w_expert_stride = m.down_expert_stride;
  g.n = static_cast<int32_t>(m.hidden);
  g.k = static_cast<int32_t>(m.inter);
  g.out = reinterpret_cast<bf16*>(ws + l.y);
  g.out_stride = m.hidden;
  g.early_weights = plan.tiles != MoeTiles::kLarge;
  return wgmma ? LaunchGroupedGemmWgmma(g, plan.max_tiles, false, stream)
               : LaunchGemm<Down>(g, plan.max_tiles, stream);
}

}  // namespace

bool MoeExpertsSupported(const MoeExpertsArgs& m) {
  return m.hidden % 8 == 0 && m.inter % 8 == 0 && m.x_stride % 8 == 0 && m.out_stride % 8 == 0 &&
         m.gate_up_expert_stride % 8 == 0 && m.down_expert_stride % 8 == 0 && Aligned16(m.x) &&
         Aligned16(m.out) && Aligned16(m.w_gate_up) && Aligned16(m.w_down) &&
         m.experts + 1 <= kMaxSortBuckets && m.rows * m.top_k <= (int64_t{1} << 30);
}

namespace {
std::atomic<bool> vector_kernels_enabled{true};
}  // namespace

void SetMoeVectorKernelsEnabled(bool enabled) { vector_kernels_enabled.store(enabled); }

cudaError_t PlanMoeExperts(const MoeExpertsArgs& m, MoePlan* plan) {
  const int64_t n = m.rows * m.top_k;
  // The vector kernels read a weight row once per assignment (a row two tokens share comes from
  // the L2 the second time), so they serve calls that route about one token per expert. Their
  // unit counts (n * inter, tokens * hidden) are 32-bit.
  if (n <= kMoeVectorMaxAssignments && n <= m.experts &&
      n * std::max(m.inter, m.hidden) < INT32_MAX && vector_kernels_enabled.load()) {
    plan->tiles = MoeTiles::kVector;
    plan->block_m = 0;
    plan->max_tiles = 0;
    plan->workspace_bytes = Align256(n * m.inter * sizeof(bf16));
    return cudaSuccess;
  }
  const int64_t active = std::min<int64_t>(m.experts, n);
  // Average rows per active expert decides the tile shape.
  const int64_t rows = active > 0 ? n / active : 0;
  plan->tiles = rows >= kMoeLargeTileRows    ? MoeTiles::kLarge
                : rows >= kMoeMediumTileRows ? MoeTiles::kMedium
                                             : MoeTiles::kSmall;
  plan->block_m = plan->tiles == MoeTiles::kLarge    ? LargeGateUp::BM
                  : plan->tiles == MoeTiles::kMedium ? MediumGateUp::BM
                                                     : SmallGateUp::BM;
  plan->max_tiles = (n + plan->block_m - 1) / plan->block_m + active;
  plan->workspace_bytes = MakeLayout(m, plan->max_tiles).total;
  return cudaSuccess;
}

cudaError_t LaunchMoeRouteExperts(const MoeExpertsArgs& m, const MoePlan& plan,
                                  const MoeVectorRouting& routing, void* workspace,
                                  cudaStream_t stream) {
  if (m.rows == 0) return cudaSuccess;
  if (plan.tiles == MoeTiles::kVector && m.experts <= kMoeVectorRouteMaxExperts &&
      m.rows <= kMoeVectorRouteMaxRows) {
    return LaunchMoeVector(m, workspace, stream, &routing);
  }
  const cudaError_t err = LaunchMoeRoute(routing.logits, routing.logits_stride, m.rows, m.experts,
                                         static_cast<int32_t>(m.top_k), routing.renormalize,
                                         const_cast<float*>(m.weights), m.weights_stride,
                                         const_cast<int32_t*>(m.topk_ids), m.ids_stride, stream);
  return err != cudaSuccess ? err : LaunchMoeExperts(m, plan, workspace, stream);
}

cudaError_t LaunchMoeExperts(const MoeExpertsArgs& m, const MoePlan& plan, void* workspace,
                             cudaStream_t stream) {
  if (m.rows == 0) return cudaSuccess;
  if (plan.tiles == MoeTiles::kVector) return LaunchMoeVector(m, workspace, stream);
  char* ws = static_cast<char*>(workspace);
  const Layout l = MakeLayout(m, plan.max_tiles);
  SortArgs s{};
  s.ids = m.topk_ids;
  s.ids_stride = m.ids_stride;
  s.rows = static_cast<int32_t>(m.rows);
  s.top_k = static_cast<int32_t>(m.top_k);
  s.experts = static_cast<int32_t>(m.experts);
  s.block_m = plan.block_m;
  s.warps = SortWarps(m.experts, m.rows * m.top_k);
  s.offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  s.tile_expert = reinterpret_cast<int32_t*>(ws + l.tile_expert);
  s.tile_row = reinterpret_cast<int32_t*>(ws + l.tile_row);
  s.num_tiles = reinterpret_cast<int32_t*>(ws + l.num_tiles);
  s.slot_token = reinterpret_cast<int32_t*>(ws + l.slot_token);
  s.inv = reinterpret_cast<int32_t*>(ws + l.inv);
  const size_t sort_shared = static_cast<size_t>(s.warps + 1) * (m.experts + 1) * sizeof(int);
  cudaError_t err = AllowDynamicSmem<MoeSortKernel>(kSortSharedBytes);
  if (err != cudaSuccess) return err;
  err = LaunchKernel(STRATA_MOE_PDL, MoeSortKernel, dim3(1), dim3(kSortThreads), sort_shared,
                     stream, s);
  if (err != cudaSuccess) return err;
  switch (plan.tiles) {
    case MoeTiles::kLarge:
      err = LaunchGemms<LargeGateUp, LargeDown>(m, plan, ws, l, stream);
      break;
    case MoeTiles::kMedium:
      err = LaunchGemms<MediumGateUp, MediumDown>(m, plan, ws, l, stream);
      break;
    case MoeTiles::kSmall:
    case MoeTiles::kVector:  // not reached (returned above)
      err = LaunchGemms<SmallGateUp, SmallDown>(m, plan, ws, l, stream);
      break;
  }
  if (err != cudaSuccess) return err;
  return LaunchKernel(STRATA_MOE_PDL, MoeCombineKernel, dim3(static_cast<unsigned>(m.rows)),
                      dim3(kCombineThreads), 0, stream, reinterpret_cast<const bf16*>(ws + l.y),
                      m.hidden, static_cast<const int32_t*>(s.inv),
                      static_cast<const int32_t*>(s.offsets), s.experts, m.weights,
                      m.weights_stride, s.top_k, m.out, m.out_stride);
}

}  // namespace strata::cuda
