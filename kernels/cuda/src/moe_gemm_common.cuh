// What the grouped expert GEMMs of moe_experts share between the mma.sync kernels
// (kernels_moe_experts.cu) and the Hopper wgmma kernel (kernels_moe_experts_sm90a.cu): the
// launch arguments, the tile shapes, the cp.async loader (A rows gathered through the sorted
// token list, B rows straight from an expert's weight; rows of kBK = 64 bf16 = 128 bytes with
// 16-byte chunks XOR-swizzled by (row & 7), which is also wgmma's 128-byte swizzle), the CTA
// rasterization and the pipeline prologue, and programmatic dependent launch. The mma.sync
// stage (ldmatrix fragments, m16n8k16 products) and the prologue also serve the dense
// decode-sized GEMM of kernels_skinny_gemm.cu, with its own loader.
//
// Device code only (plus GemmArgs); included by .cu files.
#pragma once

#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"

namespace strata::cuda::moe {

constexpr int kBK = 64;  // K elements per pipeline stage (128 bytes of a row)
// The kernels here are launched with programmatic stream serialization (GemmArgs::pdl says
// when not): see WaitForPrerequisites in device_util.cuh.
struct GemmArgs {
  const bf16* a;  // A rows: a + a_rows[slot] * a_stride (a_rows NULL: the slot itself)
  int64_t a_stride;
  const int32_t* a_rows;
  const bf16* w;  // expert e's [N_total, K] weight at w + e * w_expert_stride
  int64_t w_expert_stride;
  int32_t n;  // output columns (I for gate_up: gate rows [0, I), up rows [I, 2I))
  int32_t k;
  int32_t experts;  // experts in w (the TMA kernel's tensor map)
  const int32_t* offsets;
  const int32_t* tile_expert;
  const int32_t* tile_row;
  const int32_t* num_tiles;
  bf16* out;  // out[slot, col], row stride out_stride
  int64_t out_stride;
  // The tile table and the weights were complete before the predecessor grid started (true
  // for the down GEMM): the first tile's weight stages load before waiting for it.
  bool early_weights;
  // Launch with programmatic dependent launch. Off for the large tiles: there the dependent
  // grid's CTAs, resident early, cost more than the launch gap they hide.
  bool pdl;
};

// Byte offset of 16-byte chunk `chunk` of tile row `row` (rows of kBK bf16 = 128 bytes).
__device__ __forceinline__ uint32_t Swizzle(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// Tile shape: BM slots x BN output columns per CTA, WM x WN warps, P = 2 for gate_up (the CTA
// holds gate and up rows of the same columns), 1 for down.
template <int BM_, int BN_, int WM_, int WN_, int STAGES_, int P_, int MIN_BLOCKS_, int GROUP_M_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_, STAGES = STAGES_, P = P_;
  static constexpr int GROUP_M = GROUP_M_;        // m-tiles that walk the n-tiles together
  static constexpr int kMinBlocks = MIN_BLOCKS_;  // CTAs per SM the register budget allows
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kMI = BM / WM / 16, kNI = BN / WN / 8;
  static constexpr int kBRows = P * BN;
  static constexpr int kStageBytes = (BM + kBRows) * 128;
  static constexpr int kSharedBytes = STAGES * kStageBytes;
  static_assert(kMI >= 1 && kNI >= 1, "tile too small");
  static_assert(BM % (kThreads / 8) == 0 && BN % (kThreads / 8) == 0, "rows per copy step");
};

// a_off[r] = element offset of slot row0 + r's A row (-1 past row_end), r < bm, filled by the
// CTA's first `threads` threads; the caller syncs before reading it.
__device__ __forceinline__ void FillRowOffsets(const GemmArgs& g, int64_t* a_off, int bm, int row0,
                                               int row_end, int threads) {
  for (int r = threadIdx.x; r < bm; r += threads) {
    const int slot = row0 + r;
    const int64_t src = slot >= row_end ? -1 : g.a_rows != nullptr ? g.a_rows[slot] : slot;
    a_off[r] = src < 0 ? -1 : src * g.a_stride;
  }
}

// The tile's copy sources. A rows are gathered, so their element offsets (-1: past the group)
// sit in shared memory; B rows are consecutive weight rows, addressed from one base per part.
// Thread t copies chunk (t & 7) of rows (t >> 3) + i * kRowStep: few registers per thread.
template <typename T>
struct Loader {
  static constexpr int kRowStep = T::kThreads / 8;
  const int64_t* a_off;  // shared, [BM]
  const bf16* a;
  const bf16* b_base;   // weight row n0 + (t >> 3) of the gate (or only) part, chunk (t & 7)
  int64_t part_stride;  // elements from a gate row to its up row (n * k)
  int b_cols_left;      // valid B rows per part from this thread's first row: n - n0 - (t >> 3)
  int k;

  // Thread 0..BM-1 fills a_off; the caller syncs before the first Load.
  __device__ void Init(const GemmArgs& g, int64_t* a_off_smem, int expert, int row0, int row_end,
                       int n0) {
    FillRowOffsets(g, a_off_smem, T::BM, row0, row_end, T::kThreads);
    a_off = a_off_smem;
    a = g.a;
    const int r0 = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    b_cols_left = g.n - n0 - r0;
    b_base = g.w + expert * g.w_expert_stride + static_cast<int64_t>(n0 + r0) * g.k + chunk * 8;
    part_stride = static_cast<int64_t>(g.n) * g.k;
    k = g.k;
  }

  // Stage `stage` <- K columns [k0, k0 + kBK) of A and/or B; chunks past K or past the group
  // are zero-filled.
  __device__ void Load(uint32_t smem, int stage, int k0, bool load_a = true,
                       bool load_b = true) const {
    const uint32_t a_base = smem + stage * T::kStageBytes, b_smem = a_base + T::BM * 128;
    const int r0 = threadIdx.x >> 3, chunk = threadIdx.x & 7;
    const bool k_ok = k0 + chunk * 8 < k;
#pragma unroll
    for (int i = 0; i < T::BM / kRowStep; ++i) {
      if (!load_a) break;
      const int r = r0 + i * kRowStep;
      const int64_t off = a_off[r];
      const bool ok = k_ok && off >= 0;
      CopyAsync16(a_base + Swizzle(r, chunk), a + (ok ? off + k0 + chunk * 8 : 0), ok);
    }
#pragma unroll
    for (int i = 0; i < T::kBRows / kRowStep; ++i) {
      if (!load_b) break;
      const int r = r0 + i * kRowStep;          // tile row: part r / BN, column r % BN
      const int part = (i * kRowStep) / T::BN;  // kRowStep divides BN: uniform per i
      const int col = r - part * T::BN - r0;    // column offset from this thread's first row
      const bool ok = k_ok && col < b_cols_left;
      const bf16* src = b_base + part * part_stride + static_cast<int64_t>(col) * k + k0;
      CopyAsync16(b_smem + Swizzle(r, chunk), ok ? src : a, ok);
    }
  }
};

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX2(uint32_t addr, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc[p][mi][ni] += A[warp rows] * B[part p, warp cols]^T over one kBK stage.
template <typename T>
__device__ __forceinline__ void ComputeStage(uint32_t a_base, uint32_t b_base, int warp_m,
                                             int warp_n, float (&acc)[T::P][T::kMI][T::kNI][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    uint32_t af[T::kMI][4];
#pragma unroll
    for (int mi = 0; mi < T::kMI; ++mi) {
      const int row = warp_m * (T::BM / T::WM) + mi * 16 + (lane & 15);
      LdMatrixX4(a_base + Swizzle(row, kk * 2 + (lane >> 4)), af[mi]);
    }
#pragma unroll
    for (int p = 0; p < T::P; ++p) {
#pragma unroll
      for (int ni = 0; ni < T::kNI; ++ni) {
        if constexpr (T::kNI % 2 == 0) {
          if (ni % 2 != 0) continue;
          const int row =
              p * T::BN + warp_n * (T::BN / T::WN) + ni * 8 + (lane & 7) + ((lane >> 4) << 3);
          uint32_t bf[4];
          LdMatrixX4(b_base + Swizzle(row, kk * 2 + ((lane >> 3) & 1)), bf);
#pragma unroll
          for (int mi = 0; mi < T::kMI; ++mi) {
            Mma(acc[p][mi][ni], af[mi], bf[0], bf[1]);
            Mma(acc[p][mi][ni + 1], af[mi], bf[2], bf[3]);
          }
        } else {
          const int row = p * T::BN + warp_n * (T::BN / T::WN) + ni * 8 + (lane & 7);
          uint32_t bf[2];
          LdMatrixX2(b_base + Swizzle(row, kk * 2 + ((lane >> 3) & 1)), bf);
#pragma unroll
          for (int mi = 0; mi < T::kMI; ++mi) Mma(acc[p][mi][ni], af[mi], bf[0], bf[1]);
        }
      }
    }
  }
}

__device__ __forceinline__ float Silu(float g) { return g / (1.0f + __expf(-g)); }

// CTA L of the 1-D grid -> (m-tile, n-tile): groups of GROUP_M consecutive m-tiles walk the
// n-tiles together, so the group's A rows and each weight tile stay in the L2 while the CTAs
// that share them run (an m-tile-major or n-tile-major order re-reads one of them from HBM).
template <typename T>
__device__ void MapCta(int n_tiles, int* m_tile, int* n_tile) {
  const int per_group = T::GROUP_M * n_tiles;
  const int group = blockIdx.x / per_group, in_group = blockIdx.x % per_group;
  *m_tile = group * T::GROUP_M + in_group % T::GROUP_M;
  *n_tile = in_group / T::GROUP_M;
}

// The CTA's first kBK stages (K tiles kt0, kt0 + 1, ... of its k_tiles): with early_weights
// the weight stages stream before waiting for the predecessor that writes A (commit group s
// still holds stage s's A; group 0 also all B). L is Loader<T> or any loader with its Load.
template <typename T, typename L>
__device__ void Prologue(const L& loader, uint32_t smem, int k_tiles, bool early_weights,
                         int kt0 = 0) {
  if (early_weights) {
    for (int s = 0; s < T::STAGES - 1 && s < k_tiles; ++s) {
      loader.Load(smem, s, (kt0 + s) * kBK, false);
    }
    WaitForPrerequisites();
    AllowDependents();
  }
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < k_tiles) loader.Load(smem, s, (kt0 + s) * kBK, true, !early_weights);
    CommitGroup();
  }
}

// The wgmma grouped GEMM for the large (prefill-sized) tiles, kernels_moe_experts_sm90a.cu:
// same arguments and m-tile table (BM = kWgmmaTileM rows) as GroupedGemmKernel; gate_up: P = 2.
// Only where WgmmaAvailable().
inline constexpr int kWgmmaTileM = 128;
cudaError_t LaunchGroupedGemmWgmma(const GemmArgs& g, int64_t max_tiles, bool gate_up,
                                   cudaStream_t stream);

}  // namespace strata::cuda::moe
