// gemm and gemm_silu_mul at 17-64 rows on Hopper's warpgroup MMA (sm_90a only; the mma.sync
// kernel of kernels_skinny_gemm.cu serves every other case and device). Same column tiles,
// loader, split-K cluster reduction and launch (skinny_gemm_common.cuh); what changes is the
// math: the CTA is one warpgroup, and each k16 step is one wgmma.m64n128k16 with A (the 64 x
// rows, zero-padded past M) and B (128 weight rows: 128 output columns, or 64 gate and 64 up
// rows for silu) read from shared memory through descriptors. The loader's swizzled 128-byte
// rows are wgmma's K-major 128-byte-swizzle layout as they are (as in the MoE wgmma kernel).
// At 64 rows the mma.sync kernel's 4 warps spend most of a stage issuing ldmatrix and mma;
// here the math of a stage is 4 instructions and the stream stays the bottleneck.
#include "skinny_gemm_common.cuh"
#include "wgmma.cuh"

namespace strata::cuda::skinny {
namespace {

using namespace wgmma;  // NOLINT(google-build-using-namespace)

// Bench variants only (built by hand): STRATA_SKINNY90_STAGES, STRATA_SKINNY90_CTAS (per SM).
#ifndef STRATA_SKINNY90_STAGES
#define STRATA_SKINNY90_STAGES 4
#endif
#ifndef STRATA_SKINNY90_CTAS
#define STRATA_SKINNY90_CTAS 2
#endif
// BM 64 (one warpgroup of 4 warps, 16 rows each), 128 B rows, P = 2 for silu.
template <int P>
using WgTile = moe::Tile<64, 128 / P, 4, 1, STRATA_SKINNY90_STAGES, P, STRATA_SKINNY90_CTAS, 1>;
constexpr uint32_t kAtomBytes = 1024;  // 8 rows x 128 bytes: one swizzle atom

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) SkinnyWgmmaKernel(SkinnyArgs g) {
  static_assert(T::BM == 64 && T::kBRows == 128 && T::kThreads == 128, "m64n128, one warpgroup");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // The hardware swizzles absolute shared addresses: stages start on an atom.
  const uint32_t base = SmemAddress(smem_raw);
  const uint32_t smem = (base + kAtomBytes - 1) & ~(kAtomBytes - 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  DenseLoader<T> loader;
  const CtaSlice cta = StartCta<T>(g, smem, &loader);
  const int n0 = cta.n0;
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
  for (int t = 0; t < cta.tiles; ++t) {
    WaitGroup<T::STAGES - 2>();
    FenceProxyAsync();  // the copies (generic proxy) before the wgmma reads (async proxy)
    __syncthreads();
    // The slot refilled here was read by the previous stage's wgmma, already waited for.
    const int next = t + T::STAGES - 1;
    if (next < cta.tiles) loader.Load(smem, next % T::STAGES, (cta.kt0 + next) * kBK);
    CommitGroup();
    const uint32_t stage = smem + (t % T::STAGES) * T::kStageBytes;
    WgmmaFence();
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k) {  // k16 step: 32 bytes along the rows
      WgmmaSS128(acc, Descriptor(stage + k * 32, 16, kAtomBytes),
                 Descriptor(stage + T::BM * 128 + k * 32, 16, kAtomBytes), 1);
    }
    WgmmaCommit();
    WgmmaWait<0>();
  }
  WaitGroup<0>();
  PinRegisters(acc);
  // acc[4 j + 2 h + c]: row warp * 16 + lane / 4 + 8 h, B row 8 j + 2 (lane % 4) + c.
  const int r0 = warp * 16 + (lane >> 2);
  const int c0 = 2 * (lane & 3);
  constexpr int kCols = T::BN / 8;  // n8 groups per part
  if (g.splits == 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + 8 * h;
      if (row >= g.m) continue;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = n0 + 8 * j + c0 + c;
          if (col >= g.n) continue;
          StoreOut<T::P>(g, row, col, acc[4 * j + 2 * h + c],
                         acc[4 * (j + (T::P - 1) * kCols) + 2 * h + c]);
        }
      }
    }
    return;
  }
  // Split K: this CTA's partial tile into its (now idle) ring, then its share of the sum.
  __syncthreads();
  float* partial = reinterpret_cast<float*>(smem_raw + (smem - base));
  constexpr int kLd = kPartialLd<T>;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // B row 8 j + c0 = part * BN + column
      *reinterpret_cast<float2*>(partial + (r0 + 8 * h) * kLd + 8 * j + c0) =
          make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
  ReduceSplits<T>(g, partial, cta.split, n0);
}

template <typename T>
cudaError_t Launch(const SkinnyArgs& g, cudaStream_t stream) {
  return LaunchSplitK<T, SkinnyWgmmaKernel<T>>(g, T::kSharedBytes + kAtomBytes, stream);
}

}  // namespace

cudaError_t LaunchSkinnyWgmma(const SkinnyArgs& g, bool silu, cudaStream_t stream) {
  return silu ? Launch<WgTile<2>>(g, stream) : Launch<WgTile<1>>(g, stream);
}

// gemm_silu_mul over many column tiles (Llama-3.1-8B's gate_up: 224 tiles of 64 + 64 rows): an
// 8-stage ring at one CTA per SM; against cuBLAS + silu_mul in gemm_bench (NOTES.md).
cudaError_t LaunchSkinnyWgmmaDeepSilu(const SkinnyArgs& g, cudaStream_t stream) {
  return Launch<moe::Tile<64, 64, 4, 1, 8, 2, 1, 1>>(g, stream);
}

}  // namespace strata::cuda::skinny
