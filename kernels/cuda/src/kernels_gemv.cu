// gemm for decode-sized M (1-4 rows; `gemm` sends it M <= kGemvGemmRows):
// out[m, n] = (accumulate ? out[m, n] : 0) + x[m] . w[n] (+ bias[n]) in fp32, rounded once;
// and gemm_silu_mul at M <= 2 (a unit pairs a gate row with its up row; SiLU-mul in the epilogue,
// so the [M, 2I] projection never goes to memory).
//
// At M <= 4 a projection is a weight stream (2 FLOPs per weight byte pair and token). Each warp
// owns units of 2 consecutive weight rows (or 1, where that balances the warps better) and
// streams them with warp_dot.cuh's DotRows (16
// loads of 16 bytes per lane issued before any is used; x stays in L1), for all M rows of x at
// once, so every weight byte is read once. Persistent grid (2 CTAs of 8 warps per SM, warps
// striding over the units), programmatic dependent launch; with early_weights (the ops before
// did not write w) each warp's first pass is loaded before waiting for the predecessor. Deterministic: fixed summation order,
// no atomics. The bias and the accumulation are fused (cuBLAS plus the bias epilogue round
// twice).
#include <algorithm>
#include <climits>
#include <cstdint>

#include "strata/kernels/cuda_kernels.h"
#include "device_util.cuh"
#include "warp_dot.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerCta = kThreads / 32;
constexpr int kCtasPerSm = 2;
constexpr int kLoads = 16;

struct GemvArgs {
  const bf16* x;
  int ldx;
  const bf16* w;
  int64_t ldw;
  const bf16* bias;  // may be null
  bf16* out;
  int64_t ldo;
  int n, k;
  bool accumulate;
  bool early_weights;  // w is not written by the predecessor: read before waiting for it
  // > 0: gemm_silu_mul with I = silu_inter (n = 2 I): unit c pairs gate row c with up row
  // c + I, and out[m, c] = silu_mul of the two rounded projections (R = 2 only).
  int silu_inter;
};

// The weight rows of unit u (null past N).
template <int R>
__device__ __forceinline__ void UnitRows(const GemvArgs& a, int u, const bf16* (&w)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = a.silu_inter > 0 ? u + r * a.silu_inter : u * R + r;
    w[r] = row < a.n ? a.w + int64_t{row} * a.ldw : nullptr;
  }
}

// One unit: the dot products of its R weight rows w with the M rows of x (kFirstLoaded: the
// first pass is in *first), then lane 0 writes them (bias, accumulation, or silu_mul of the
// gate / up pair).
template <int M, int R, int KP, bool kFirstLoaded = false>
__device__ __forceinline__ void RunUnit(const GemvArgs& a, int u, const bf16* const (&w)[R],
                                        const WeightPass<R, KP>* first = nullptr) {
  float acc[R][M];
  if constexpr (kFirstLoaded) {
    DotRowsFrom<R, M, KP>(*first, w, a.x, 0, 1, a.ldx, a.k / 8, acc);
  } else {
    DotRows<R, M, KP>(w, a.x, 0, 1, a.ldx, a.k / 8, acc);
  }
  if ((threadIdx.x & 31) != 0) return;
  if constexpr (R == 2) {
    if (a.silu_inter > 0) {
      // The gemm's roundings, then silu_mul's arithmetic (SiluMulKernel): bit for bit the two
      // ops in sequence.
      const float bg = a.bias != nullptr ? __bfloat162float(a.bias[u]) : 0.0f;
      const float bu = a.bias != nullptr ? __bfloat162float(a.bias[u + a.silu_inter]) : 0.0f;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float g = __bfloat162float(__float2bfloat16(acc[0][m] + bg));
        const float up = __bfloat162float(__float2bfloat16(acc[1][m] + bu));
        a.out[m * a.ldo + u] = __float2bfloat16(g / (1.0f + expf(-g)) * up);
      }
      return;
    }
  }
  const int n0 = u * R;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (n0 + r >= a.n) continue;
    const float bias = a.bias != nullptr ? __bfloat162float(a.bias[n0 + r]) : 0.0f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      bf16* o = a.out + m * a.ldo + n0 + r;
      const float base = a.accumulate ? __bfloat162float(*o) : 0.0f;
      *o = __float2bfloat16(base + acc[r][m] + bias);
    }
  }
}

// R weight rows per unit (16 / R chunks of each per pass).
template <int M, int R>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) GemvKernel(GemvArgs a) {
  constexpr int kPass = kLoads / R;
  const int lane = threadIdx.x & 31;
  const int units = a.silu_inter > 0 ? a.silu_inter : (a.n + R - 1) / R;
  const int warps = gridDim.x * kWarpsPerCta;
  const int first = blockIdx.x * kWarpsPerCta + threadIdx.x / 32;
  const int chunks = a.k / 8;
  const bf16* w[R];
  WeightPass<R, kPass> pass;
  if (first < units) UnitRows(a, first, w);
  // The weights do not come from the predecessor (early_weights): the first pass of the first
  // unit streams while it drains.
  if (a.early_weights && first < units) LoadPass<true>(w, lane, chunks, pass);
  WaitForPrerequisites();  // x (and out when accumulating)
  AllowDependents();
  if (first >= units) return;
  if (a.early_weights) {
    RunUnit<M, R, kPass, true>(a, first, w, &pass);
  } else {
    RunUnit<M, R, kPass>(a, first, w);
  }
  for (int u = first + warps; u < units; u += warps) {
    UnitRows(a, u, w);
    RunUnit<M, R, kPass>(a, u, w);
  }
}

// The launchers' arguments (sizes already checked by GemvServes).
GemvArgs MakeArgs(int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w, int64_t ldw,
                  const bf16* bias, bool accumulate, int64_t silu_inter, bf16* out, int64_t ldo,
                  bool early_weights) {
  GemvArgs a{};
  a.x = x;
  a.ldx = static_cast<int>(ldx);
  a.w = w;
  a.ldw = ldw;
  a.bias = bias;
  a.out = out;
  a.ldo = ldo;
  a.n = static_cast<int>(n);
  a.k = static_cast<int>(k);
  a.accumulate = accumulate;
  a.early_weights = early_weights;
  a.silu_inter = static_cast<int>(silu_inter);
  return a;
}

}  // namespace

bool GemvServes(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                int64_t ldw) {
  return m >= 1 && m <= kGemvGemmRows && WeightStreamShape(n, k, x, ldx, w, ldw) &&
         ldx * kGemvMaxRows < INT_MAX;
}

bool WeightStreamShape(int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                       int64_t ldw) {
  return n >= 1 && n < (1 << 30) && k >= 8 && k < (int64_t{1} << 30) && k % 8 == 0 &&
         ldx % 8 == 0 && ldw % 8 == 0 && Aligned16(x) && Aligned16(w);
}

cudaError_t LaunchGemv(int64_t m, int64_t n, int64_t k, const bf16* x, int64_t ldx, const bf16* w,
                       int64_t ldw, const bf16* bias, bool accumulate, bf16* out, int64_t ldo,
                       bool early_weights, cudaStream_t stream) {
  const GemvArgs a = MakeArgs(n, k, x, ldx, w, ldw, bias, accumulate, 0, out, ldo, early_weights);
  // Units of 2 rows, unless single rows spread the rows over the warps more evenly (a grid-wide
  // round of units takes as long as its fullest warp) and are long enough (K >= 4,096) to fill
  // a pass's 16 loads per lane on their own.
  const int64_t warps = int64_t{SmCount()} * kCtasPerSm * kWarpsPerCta;
  const bool pairs =
      k < 32 * 8 * kLoads || 2 * ((n + 2 * warps - 1) / (2 * warps)) <= (n + warps - 1) / warps;
  const int64_t units = pairs ? (n + 1) / 2 : n;
  const dim3 grid = PersistentGrid(units, kWarpsPerCta, kCtasPerSm);
  auto launch = [&](auto kernel) { return LaunchPdl(kernel, grid, dim3(kThreads), 0, stream, a); };
  switch (m) {
    case 1:
      return pairs ? launch(GemvKernel<1, 2>) : launch(GemvKernel<1, 1>);
    case 2:
      return pairs ? launch(GemvKernel<2, 2>) : launch(GemvKernel<2, 1>);
    case 3:
      return pairs ? launch(GemvKernel<3, 2>) : launch(GemvKernel<3, 1>);
    case 4:
      return pairs ? launch(GemvKernel<4, 2>) : launch(GemvKernel<4, 1>);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchGemvSiluMul(int64_t m, int64_t inter, int64_t k, const bf16* x, int64_t ldx,
                              const bf16* w, int64_t ldw, const bf16* bias, bf16* out, int64_t ldo,
                              bool early_weights, cudaStream_t stream) {
  const GemvArgs a =
      MakeArgs(2 * inter, k, x, ldx, w, ldw, bias, false, inter, out, ldo, early_weights);
  const dim3 grid = PersistentGrid(inter, kWarpsPerCta, kCtasPerSm);
  auto launch = [&](auto kernel) { return LaunchPdl(kernel, grid, dim3(kThreads), 0, stream, a); };
  switch (m) {
    case 1:
      return launch(GemvKernel<1, 2>);
    case 2:
      return launch(GemvKernel<2, 2>);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace strata::cuda
