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
#include "cuda_kernels.h"
#include "moe_gemm_common.cuh"
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

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) GroupedGemmWgmmaKernel(GemmArgs g) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ int64_t a_off[T::BM];
  // The hardware swizzles absolute shared addresses: stages start on an atom.
  const uint32_t smem = (SmemAddress(smem_raw) + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const int warp = threadIdx.x >> 5, wg = warp >> 2, lane = threadIdx.x & 31;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  int tile, n_tile;
  MapCta<T>((g.n + T::BN - 1) / T::BN, &tile, &n_tile);
  // Launched without programmatic serialization: the predecessor has completed.
  if (tile >= *g.num_tiles) return;
  const int n0 = n_tile * T::BN;
  const int expert = g.tile_expert[tile], row0 = g.tile_row[tile];
  const int row_end = min(row0 + T::BM, g.offsets[expert + 1]);
  Loader<T> loader;
  loader.Init(g, a_off, expert, row0, row_end, n0);
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
    const uint32_t stage = (kt % T::STAGES) * T::kStageBytes;
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k) {
      const uint32_t off = (stage + k * 32) >> 4;  // k16 step: 32 bytes along the row
      WgmmaSS<T::kBRows>(acc, a_desc + off, b_desc + off);
    }
    WgmmaCommit();
    WgmmaWait<1>();
  }
  WgmmaWaitAll();
  PinRegisters(acc);
  // acc[4 j + 2 h + c]: slot row (wg * 64 + (warp % 4) * 16 + lane / 4 + 8 h), B row
  // 8 j + 2 (lane % 4) + c.
  const int r0 = wg * 64 + (warp & 3) * 16 + (lane >> 2);
  constexpr int kCols = T::BN / 8;  // n8 groups per part
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int slot = row0 + r0 + 8 * h;
    if (slot >= row_end) continue;
    bf16* out = g.out + slot * g.out_stride;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int col = n0 + 8 * j + 2 * (lane & 3);
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
cudaError_t Launch(const GemmArgs& g, int64_t max_tiles, cudaStream_t stream) {
  constexpr int kShared = T::kSharedBytes + kAtomBytes;
  const cudaError_t err = AllowDynamicSmem<GroupedGemmWgmmaKernel<T>>(kShared);
  if (err != cudaSuccess) return err;
  const int64_t n_tiles = (g.n + T::BN - 1) / T::BN;
  const int64_t m_slots = (max_tiles + T::GROUP_M - 1) / T::GROUP_M * T::GROUP_M;
  if (m_slots * n_tiles > INT32_MAX) return cudaErrorInvalidConfiguration;
  GroupedGemmWgmmaKernel<T>
      <<<static_cast<unsigned>(m_slots * n_tiles), T::kThreads, kShared, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGroupedGemmWgmma(const GemmArgs& g, int64_t max_tiles, bool gate_up,
                                   cudaStream_t stream) {
  return gate_up ? Launch<WgGateUp>(g, max_tiles, stream) : Launch<WgDown>(g, max_tiles, stream);
}

}  // namespace strata::cuda::moe
