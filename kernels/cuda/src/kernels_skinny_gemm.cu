// gemm and gemm_silu_mul at decode-sized M above the GEMV's (kGemvGemmRows < M <=
// kSkinnyGemmRows = 64): out[m, n] = (accumulate ? out[m, n] : 0) + x[m] . w[n]
// (+ bias[n]) in fp32, rounded once; with silu, out[m, c] = silu(g) * u of the rounded gate and
// up projections (gate row c, up row c + I), bit for bit gemm then silu_mul.
//
// At M <= 64 a projection is a weight stream that also needs tensor cores (64 rows make 64
// FLOPs per weight byte pair, more than the CUDA cores keep up with at HBM rate). One CTA owns
// BN output columns and all M rows (BM = 16, 32 or 64: the M rows zero-padded) and streams its
// weight rows through a cp.async ring of kBK = 64 wide K tiles, bf16 mma.sync.m16n8k16 with
// fp32 accumulation (the MoE grouped GEMM's swizzled tiles and ComputeStage,
// moe_gemm_common.cuh). x's BM rows are re-read by every column tile, from the L2: BN = 128
// weight rows keep that at BM / BN of the weight bytes.
//
// Decode projections have few column tiles (Llama-3.1-8B's o: 32 of 128 columns) for 132 SMs,
// so K is split: a thread-block cluster of S CTAs shares a column tile, each CTA a contiguous
// run of K tiles; the partial sums meet in shared memory, and each CTA of the cluster reduces
// a 1/S share of the tile by reading all S partials through distributed shared memory in rank
// order (deterministic: no atomics, the same order on every run, nothing through global
// memory). S is the largest that keeps the grid to one wave (at most 8, the portable cluster
// size; at least 4 K tiles per CTA) and that the device can co-schedule. Rows 17-64 take the
// wgmma variant (kernels_skinny_gemm_sm90a.cu) where the device has it.
//
// `gemm` takes this kernel only where it measured ahead of cuBLAS: at most 16 column tiles
// (SkinnyGemmServes). On the large Llama projections at 64 rows it stays below cuBLAS
// with mma.sync or wgmma, 3 or 2 CTAs per SM, 3-9 stages (NOTES.md): the per-CTA
// stream of a one-wave grid is latency bound and the x tile adds a third to every stage.
//
// Programmatic dependent launch: the kernel waits for its predecessor before it reads anything.
// (Prefetching the first weight stages into the L2 before that wait gained nothing in a served
// decode step, and the same prefetch in the GEMV cost time: plugins/cuda/NOTES.md.)
#include <atomic>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "skinny_gemm_common.cuh"

namespace strata::cuda {
namespace skinny {
namespace {

using moe::Tile;

template <typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) SkinnyGemmKernel(SkinnyArgs g) {
  static_assert(T::WM == 1, "one warp row: every warp holds all BM rows of its columns");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem = SmemAddress(smem_raw);
  const int lane = threadIdx.x & 31, warp_n = threadIdx.x >> 5;
  DenseLoader<T> loader;
  const CtaSlice cta = StartCta<T>(g, smem, &loader);
  const int n0 = cta.n0;
  float acc[T::P][T::kMI][T::kNI][4] = {};
  for (int t = 0; t < cta.tiles; ++t) {
    WaitGroup<T::STAGES - 2>();
    __syncthreads();
    const int next = t + T::STAGES - 1;
    if (next < cta.tiles) loader.Load(smem, next % T::STAGES, (cta.kt0 + next) * kBK);
    CommitGroup();
    const uint32_t a_smem = smem + (t % T::STAGES) * T::kStageBytes;
    moe::ComputeStage<T>(a_smem, a_smem + T::BM * 128, 0, warp_n, acc);
  }
  WaitGroup<0>();
  // f(tile row, tile column of part 0, mi, ni, half) for each accumulator pair of the warp.
  auto each_pair = [&](auto&& f) {
#pragma unroll
    for (int mi = 0; mi < T::kMI; ++mi) {
#pragma unroll
      for (int ni = 0; ni < T::kNI; ++ni) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          f(mi * 16 + (lane >> 2) + half * 8, warp_n * (T::BN / T::WN) + ni * 8 + (lane & 3) * 2,
            mi, ni, half);
        }
      }
    }
  };
  if (g.splits == 1) {
    each_pair([&](int row, int col, int mi, int ni, int half) {
      if (row >= g.m) return;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (n0 + col + j >= g.n) continue;
        StoreOut<T::P>(g, row, n0 + col + j, acc[0][mi][ni][half * 2 + j],
                       acc[T::P - 1][mi][ni][half * 2 + j]);
      }
    });
    return;
  }
  // Split K: this CTA's partial tile into its (now idle) ring, then its share of the sum.
  __syncthreads();
  float* partial = reinterpret_cast<float*>(smem_raw);
  each_pair([&](int row, int col, int mi, int ni, int half) {
#pragma unroll
    for (int p = 0; p < T::P; ++p) {
      *reinterpret_cast<float2*>(partial + row * kPartialLd<T> + p * T::BN + col) =
          make_float2(acc[p][mi][ni][half * 2], acc[p][mi][ni][half * 2 + 1]);
    }
  });
  ReduceSplits<T>(g, partial, cta.split, n0);
}

// Tiles: 4 warps side by side (each BM rows x BN / 4 columns), kCtasPerSm CTAs per SM with
// STAGES-deep rings that fill the shared memory. The stream is latency bound per CTA, so what
// counts is the weight bytes each CTA keeps in flight: (STAGES - 1) x 16 KiB. P = 2 (gate and up
// rows of the same 64 columns) for silu.
// Bench variants only (built by hand): STRATA_SKINNY_STAGES_16 / _32 / _64 (stages at BM = 16,
// 32, 64) and STRATA_SKINNY_CTAS (CTAs per SM); the plugin uses the defaults.
#ifndef STRATA_SKINNY_STAGES_16
#define STRATA_SKINNY_STAGES_16 6
#endif
#ifndef STRATA_SKINNY_STAGES_32
#define STRATA_SKINNY_STAGES_32 5
#endif
#ifndef STRATA_SKINNY_STAGES_64
#define STRATA_SKINNY_STAGES_64 4
#endif
#ifndef STRATA_SKINNY_CTAS
#define STRATA_SKINNY_CTAS 2
#endif
constexpr int kCtasPerSm = STRATA_SKINNY_CTAS;
constexpr int64_t kMaxServedTiles = 16;  // SkinnyGemmServes
// gemm_silu_mul at 33-64 rows with more tiles: the deep wgmma ring (SkinnyGemmSiluServes). 0
// builds the bench variant without it (cuBLAS + silu_mul there, as for gemm).
#ifndef STRATA_SKINNY_SILU_DEEP
#define STRATA_SKINNY_SILU_DEEP 1
#endif
// Above this many rows the fused deep ring beats cuBLAS + silu_mul (gemm_bench: NOTES.md).
constexpr int64_t kDeepSiluMinRows = 32;
constexpr int kStages[3] = {STRATA_SKINNY_STAGES_16, STRATA_SKINNY_STAGES_32,
                            STRATA_SKINNY_STAGES_64};
template <int BM, int P>
using SkinnyTile = Tile<BM, 128 / P, 1, 4,
                        kStages[BM == 16   ? 0
                                : BM == 32 ? 1
                                           : 2],
                        P, kCtasPerSm, 1>;

template <typename T>
cudaError_t LaunchSkinny(const SkinnyArgs& g, cudaStream_t stream) {
  return LaunchSplitK<T, SkinnyGemmKernel<T>>(g, T::kSharedBytes, stream);
}

std::atomic<bool> wgmma_enabled{true};

template <int P>
cudaError_t LaunchByRows(const SkinnyArgs& g, cudaStream_t stream) {
  if (g.m > 16 && wgmma_enabled.load(std::memory_order_relaxed) && WgmmaAvailable()) {
    return LaunchSkinnyWgmma(g, P == 2, stream);
  }
  if (g.m <= 16) return LaunchSkinny<SkinnyTile<16, P>>(g, stream);
  if (g.m <= 32) return LaunchSkinny<SkinnyTile<32, P>>(g, stream);
  return LaunchSkinny<SkinnyTile<64, P>>(g, stream);
}

SkinnyArgs MakeSkinnyArgs(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx,
                          const bf16* w, int64_t ldw, const bf16* bias, bool accumulate, bf16* out,
                          int64_t ldo, bool early_weights) {
  SkinnyArgs g{};
  g.x = x;
  g.ldx = ldx;
  g.m = static_cast<int>(m);
  g.w = w;
  g.ldw = ldw;
  g.n = static_cast<int>(n);
  g.k = static_cast<int>(k);
  g.bias = bias;
  g.accumulate = accumulate;
  g.out = out;
  g.ldo = ldo;
  g.splits = 1;
  g.early_weights = early_weights;
  return g;
}

}  // namespace
}  // namespace skinny

using skinny::kMaxServedTiles;

namespace skinny {
// gemm_silu_mul's deep-ring case: 33-64 rows over more tiles than SkinnyGemmServes takes, on
// wgmma. The fused silu saves cuBLAS's [M, 2I] write and the silu_mul pass, which is worth the
// slower stream there (plugins/cuda/NOTES.md).
bool DeepSiluRing(int64_t m, int64_t inter) {
  return STRATA_SKINNY_SILU_DEEP != 0 && m > kDeepSiluMinRows && m <= kSkinnyGemmRows &&
         (2 * inter + 127) / 128 > kMaxServedTiles &&
         wgmma_enabled.load(std::memory_order_relaxed) && WgmmaAvailable();
}
}  // namespace skinny

bool SkinnyGemmSiluServes(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                          const bf16* w, int64_t ldw) {
  return SkinnyGemmServes(m, 2 * inter, k, x, ldx, w, ldw) ||
         (skinny::DeepSiluRing(m, inter) && WeightStreamShape(2 * inter, k, x, ldx, w, ldw));
}
using skinny::LaunchByRows;
using skinny::MakeSkinnyArgs;

void SetSkinnyWgmmaEnabled(bool enabled) { skinny::wgmma_enabled.store(enabled); }

bool SkinnyGemmServes(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                      int64_t ldw) {
  if (m <= kGemvGemmRows || m > kSkinnyGemmRows || !WeightStreamShape(n, k, x, ldx, w, ldw)) {
    return false;
  }
  // Where it measured ahead of cuBLAS (plugins/cuda/NOTES.md, "Dense gemm at M <= 64"): at most
  // 16 column tiles, which cuBLAS does not spread over the GPU (Qwen3-30B-A3B's o and router at
  // every M). With more tiles cuBLAS streams closer to the copy rate and this kernel does not
  // catch up in the served step.
  const int64_t tiles = (n + 127) / 128;
  return tiles <= kMaxServedTiles;
}

cudaError_t LaunchSkinnyGemm(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx,
                             const bf16* w, int64_t ldw, const bf16* bias, bool accumulate,
                             bf16* out, int64_t ldo, bool early_weights, cudaStream_t stream) {
  return LaunchByRows<1>(
      MakeSkinnyArgs(m, n, k, x, ldx, w, ldw, bias, accumulate, out, ldo, early_weights), stream);
}

cudaError_t LaunchSkinnyGemmSiluMul(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                                    const bf16* w, int64_t ldw, const bf16* bias, bf16* out,
                                    int64_t ldo, bool early_weights, cudaStream_t stream) {
  const skinny::SkinnyArgs g =
      MakeSkinnyArgs(m, inter, k, x, ldx, w, ldw, bias, false, out, ldo, early_weights);
  return skinny::DeepSiluRing(m, inter) ? skinny::LaunchSkinnyWgmmaDeepSilu(g, stream)
                                        : LaunchByRows<2>(g, stream);
}

}  // namespace strata::cuda
