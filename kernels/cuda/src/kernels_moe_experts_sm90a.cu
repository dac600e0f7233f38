// moe_experts' grouped GEMMs for prefill-sized groups on Hopper's warpgroup MMA (sm_90a only;
// the mma.sync GroupedGemmKernel in kernels_moe_experts.cu serves every other case and device).
//
// Same arguments, m-tile table (128 slots per tile), row gather, cp.async loader and CTA
// rasterization as the mma.sync kernel (moe_gemm_common.cuh); what changes is the tile and the
// math. A CTA computes 128 slots x 256 B rows (gate_up: 128 gate and the 128 up columns of the
// same outputs; down: 256 output columns) with two warpgroups of 64 slots, each issuing one
// wgmma.m64n256k16 per k16 step with A and B read from shared memory through descriptors: the
// loader's rows of 64 bf16 (128 bytes, chunks XOR-swizzled by row & 7) are wgmma's K-major
// 128-byte-swizzle layout as they are. 4 stages of (128 + 256) x 128 bytes; loads run two
// stages ahead and one wgmma group stays in flight while the next stage's barrier and copies
// are issued, so the tensor cores do not wait for the issue of the copies.
//
// Where the weights can be described by a tensor map (always, for the layouts moe_experts
// accepts), the warp-specialized form runs instead (GroupedGemmWsKernel: the same math, its
// loads issued by a producer warpgroup, stages handed over through mbarriers; measured against
// the form above in plugins/cuda/NOTES.md).
#include <climits>

#include "strata/kernels/cuda_kernels.h"
#include "moe_gemm_common.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace strata::cuda::moe {
namespace {

using namespace wgmma;  // NOLINT(google-build-using-namespace)

// The STRATA_MOE90_* macros exist only so bench builds can compare variants; the plugin is
// built with the defaults. B rows per CTA (256: one m64n256 per warpgroup, or 128), stages,
// CTAs per SM, m-tiles per rasterization group.
#ifndef STRATA_MOE90_BROWS
#define STRATA_MOE90_BROWS 256
#endif
#ifndef STRATA_MOE90_STAGES
#define STRATA_MOE90_STAGES 4
#endif
#ifndef STRATA_MOE90_CTAS
#define STRATA_MOE90_CTAS 1
#endif
#ifndef STRATA_MOE90_GROUP_M
#define STRATA_MOE90_GROUP_M 8
#endif
// 0: never the warp-specialized kernel (a same-run baseline for moe_bench).
#ifndef STRATA_MOE90_WS
#define STRATA_MOE90_WS 1
#endif
constexpr int kBRows = STRATA_MOE90_BROWS;
static_assert(kBRows == 128 || kBRows == 256, "m64n128 or m64n256");
// BM, BN (per part), WM x WN (8 warps: the loader's thread count), stages, parts, CTAs per SM,
// GROUP_M.
using WgGateUp = Tile<kWgmmaTileM, kBRows / 2, 8, 1, STRATA_MOE90_STAGES, 2, STRATA_MOE90_CTAS,
                      STRATA_MOE90_GROUP_M>;
using WgDown = Tile<kWgmmaTileM, kBRows, 8, 1, STRATA_MOE90_STAGES, 1, STRATA_MOE90_CTAS,
                    STRATA_MOE90_GROUP_M>;

template <int N>
__device__ __forceinline__ void WgmmaSS(float (&d)[N / 2], uint64_t a, uint64_t b) {
  if constexpr (N == 256) {
    WgmmaSS256(d, a, b, 1);
  } else {
    WgmmaSS128(d, a, b, 1);
  }
}
constexpr uint32_t kAtomBytes = 1024;  // 8 rows x 128 bytes: one swizzle atom

// The CTA's tile: its m-tile's expert and slot rows [row0, row_end), its first output column;
// false if the m-tile is past the table's end.
struct CtaTile {
  int expert, row0, row_end, n0;
};
template <typename T>
__device__ __forceinline__ bool FindCtaTile(const GemmArgs& g, CtaTile* c) {
  int tile, n_tile;
  MapCta<T>((g.n + T::BN - 1) / T::BN, &tile, &n_tile);
  // Launched without programmatic serialization: the predecessor has completed.
  if (tile >= *g.num_tiles) return false;
  c->n0 = n_tile * T::BN;
  c->expert = g.tile_expert[tile];
  c->row0 = g.tile_row[tile];
  c->row_end = min(c->row0 + T::BM, g.offsets[c->expert + 1]);
  return true;
}

// Issues one stage's wgmma group (kBK / 16 k16 steps) at byte offset `stage` of the ring.
template <typename T>
__device__ __forceinline__ void IssueStage(float (&acc)[T::kBRows / 2], uint64_t a_desc,
                                           uint64_t b_desc, uint32_t stage) {
  WgmmaFence();
#pragma unroll
  for (int k = 0; k < kBK / 16; ++k) {
    const uint32_t off = (stage + k * 32) >> 4;  // k16 step: 32 bytes along the row
    WgmmaSS<T::kBRows>(acc, a_desc + off, b_desc + off);
  }
  WgmmaCommit();
}

// Writes the warpgroup's accumulators as bf16 (gate_up: SiLU(gate) * up). acc[4 j + 2 h + c]:
// slot row (wg * 64 + (warp % 4) * 16 + lane / 4 + 8 h), B row 8 j + 2 (lane % 4) + c.
template <typename T>
__device__ __forceinline__ void StoreTile(const GemmArgs& g, const CtaTile& c,
                                          const float (&acc)[T::kBRows / 2], int wg) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = wg * 64 + (warp & 3) * 16 + (lane >> 2);
  constexpr int kCols = T::BN / 8;  // n8 groups per part
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int slot = c.row0 + r0 + 8 * h;
    if (slot >= c.row_end) continue;
    bf16* out = g.out + slot * g.out_stride;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int col = c.n0 + 8 * j + 2 * (lane & 3);
      if (col >= g.n) continue;  // n is even: col + 1 < n too
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if constexpr (T::P == 2) {
        v0 = Silu(v0) * acc[4 * (j + kCols) + 2 * h];
        v1 = Silu(v1) * acc[4 * (j + kCols) + 2 * h + 1];
      }
      *reinterpret_cast<__nv_bfloat162*>(out + col) = __floats2bfloat162_rn(v0, v1);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) GroupedGemmWgmmaKernel(GemmArgs g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int64_t a_off[T::BM];
  // The hardware swizzles absolute shared addresses: stages start on an atom.
  const uint32_t smem = (SmemAddress(smem_raw) + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const int wg = threadIdx.x >> 7;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  CtaTile c;
  if (!FindCtaTile<T>(g, &c)) return;
  Loader<T> loader;
  loader.Init(g, a_off, c.expert, c.row0, c.row_end, c.n0);
  __syncthreads();
  // Stage s in slot s % STAGES. Copies run STAGES - 2 stages ahead, so the slot a copy refills
  // was read by the wgmma group of two stages back, which every warpgroup has waited for before
  // the barrier in between.
  constexpr int kAhead = T::STAGES - 2;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < k_tiles) loader.Load(smem, s, s * kBK);
    CommitGroup();
  }
  float acc[T::kBRows / 2];
#pragma unroll
  for (int i = 0; i < T::kBRows / 2; ++i) acc[i] = 0.0f;
  const uint64_t a_desc = Descriptor(smem + wg * 64 * 128, 16, kAtomBytes);
  const uint64_t b_desc = Descriptor(smem + T::BM * 128, 16, kAtomBytes);
  for (int kt = 0; kt < k_tiles; ++kt) {
    WaitGroup<kAhead - 1>();
    FenceProxyAsync();
    __syncthreads();
    const int next = kt + kAhead;
    if (next < k_tiles) loader.Load(smem, next % T::STAGES, next * kBK);
    CommitGroup();
    IssueStage<T>(acc, a_desc, b_desc, (kt % T::STAGES) * T::kStageBytes);
    WgmmaWait<1>();
  }
  WgmmaWaitAll();
  PinRegisters(acc);
  StoreTile<T>(g, c, acc, wg);
}

// The warp-specialized form: two math warpgroups and a producer warpgroup that gives its
// registers to them. Per stage the producer's thread 0 issues the B tile (the expert's weight
// rows of each part) as TMA boxes of a tensor map over the weights (EncodeWeightMap) and every
// producer thread its share of the gathered A rows as cp.async copies, whose completion arrives
// on the stage's `full` mbarrier (128 copy arrivals + the TMA bytes); each math warp arrives
// on the stage's `empty` mbarrier once the wgmma group that read it has completed, and the
// producer refills the slot after that. No CTA barrier per stage, no copy issued by a math warp.
constexpr int kWsMath = 256;  // two math warpgroups
constexpr int kWsThreads = kWsMath + 128;
constexpr int kWsProducerRegs = 40;
constexpr int kWsMathRegs = (65536 / 128 - kWsProducerRegs) / 2 / 8 * 8;

template <typename T>
__global__ void __launch_bounds__(kWsThreads, 1)
    GroupedGemmWsKernel(GemmArgs g, const __grid_constant__ CUtensorMap w_map) {
  static_assert(T::BM == 128 && T::kThreads == kWsMath, "the loader's 8 x 16 A layout");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int64_t a_off[T::BM];
  __shared__ __align__(8) uint64_t bars[2 * T::STAGES];
  const uint32_t smem = (SmemAddress(smem_raw) + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const uint32_t full = SmemAddress(bars), empty = full + 8 * T::STAGES;  // + 8 slot
  const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  CtaTile c;
  if (!FindCtaTile<T>(g, &c)) return;
  FillRowOffsets(g, a_off, T::BM, c.row0, c.row_end, kWsThreads);
  if (threadIdx.x == 0) {
    for (int s = 0; s < T::STAGES; ++s) {
      tma::Init(full + 8 * s, 128 + 1);
      tma::Init(empty + 8 * s, kWsMath / 32);
    }
    tma::FenceInit();
  }
  __syncthreads();
  if (wg == kWsMath / 128) {
    tma::ReleaseRegisters<kWsProducerRegs>();
    const int t = threadIdx.x - kWsMath, r0 = t >> 3, chunk = t & 7;
    if (t == 0) tma::Prefetch(&w_map);
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % T::STAGES;
      if (kt >= T::STAGES) tma::Wait(empty + 8 * s, (kt / T::STAGES - 1) & 1);
      const uint32_t a_base = smem + s * T::kStageBytes, b_base = a_base + T::BM * 128;
      const int k0 = kt * kBK;
      if (t == 0) {
        tma::ArriveExpect(full + 8 * s, T::kBRows * 128);
#pragma unroll
        for (int p = 0; p < T::P; ++p) {
          tma::Load4d(b_base + p * T::BN * 128, &w_map, k0, c.n0, p, c.expert, full + 8 * s);
        }
      }
      const bool k_ok = k0 + chunk * 8 < g.k;
#pragma unroll
      for (int i = 0; i < T::BM / 16; ++i) {
        const int r = r0 + i * 16;
        const int64_t off = a_off[r];
        const bool ok = k_ok && off >= 0;
        CopyAsync16(a_base + Swizzle(r, chunk), g.a + (ok ? off + k0 + chunk * 8 : 0), ok);
      }
      tma::CpAsyncArrive(full + 8 * s);
    }
    WaitGroup<0>();
    return;
  }
  tma::TakeRegisters<kWsMathRegs>();
  float acc[T::kBRows / 2];
#pragma unroll
  for (int i = 0; i < T::kBRows / 2; ++i) acc[i] = 0.0f;
  const uint64_t a_desc = Descriptor(smem + wg * 64 * 128, 16, kAtomBytes);
  const uint64_t b_desc = Descriptor(smem + T::BM * 128, 16, kAtomBytes);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % T::STAGES;
    tma::Wait(full + 8 * s, (kt / T::STAGES) & 1);
    FenceProxyAsync();  // the producer's cp.async rows, for wgmma's async-proxy reads
    IssueStage<T>(acc, a_desc, b_desc, s * T::kStageBytes);
    WgmmaWait<1>();  // the previous stage's group is done: its slot can be refilled
    __syncwarp();
    if (kt > 0 && lane == 0) tma::Arrive(empty + 8 * ((kt - 1) % T::STAGES));
  }
  WgmmaWaitAll();
  PinRegisters(acc);
  StoreTile<T>(g, c, acc, wg);
}

// The weights as a rank-4 tensor: (K, row within a part, part, expert), boxes of kBK columns x
// BN rows, 128-byte swizzled as the stages store them; rows past n and columns past K read as
// zeros. False where the encoder is missing or refuses the layout (the cp.async kernel runs).
template <typename T>
bool EncodeWeightMap(const GemmArgs& g, CUtensorMap* map) {
  if (g.experts < 1 || g.n < 1 || g.k < 1) return false;
  const cuuint64_t k = static_cast<cuuint64_t>(g.k), n = static_cast<cuuint64_t>(g.n);
  const cuuint64_t dims[4] = {k, n, static_cast<cuuint64_t>(T::P),
                              static_cast<cuuint64_t>(g.experts)};
  const cuuint64_t strides[3] = {k * sizeof(bf16), n * k * sizeof(bf16),
                                 static_cast<cuuint64_t>(g.w_expert_stride) * sizeof(bf16)};
  const cuuint32_t box[4] = {kBK, T::BN, 1, 1};
  return tma::EncodeBf16Map4d(g.w, dims, strides, box, map);
}

template <typename T>
cudaError_t Launch(const GemmArgs& g, int64_t max_tiles, cudaStream_t stream) {
  constexpr int kShared = T::kSharedBytes + kAtomBytes;
  const cudaError_t err = AllowDynamicSmem<GroupedGemmWgmmaKernel<T>>(kShared);
  if (err != cudaSuccess) return err;
  const int64_t n_tiles = (g.n + T::BN - 1) / T::BN;
  const int64_t m_slots = (max_tiles + T::GROUP_M - 1) / T::GROUP_M * T::GROUP_M;
  if (m_slots * n_tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  const unsigned ctas = static_cast<unsigned>(m_slots * n_tiles);
  CUtensorMap map{};
  if (STRATA_MOE90_WS && EncodeWeightMap<T>(g, &map)) {
    const cudaError_t ws = AllowDynamicSmem<GroupedGemmWsKernel<T>>(kShared);
    if (ws != cudaSuccess) return ws;
    GroupedGemmWsKernel<T><<<ctas, kWsThreads, kShared, stream>>>(g, map);
    return cudaGetLastError();
  }
  GroupedGemmWgmmaKernel<T><<<ctas, T::kThreads, kShared, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGroupedGemmWgmma(const GemmArgs& g, int64_t max_tiles, bool gate_up,
                                   cudaStream_t stream) {
  return gate_up ? Launch<WgGateUp>(g, max_tiles, stream) : Launch<WgDown>(g, max_tiles, stream);
}

}  // namespace strata::cuda::moe
