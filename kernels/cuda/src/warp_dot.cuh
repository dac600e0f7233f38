// Weight-streaming dot products for one warp, shared by the decode-sized kernels that read each
// weight row once per call: the vector MoE kernels (kernels_moe_vector.cu) and the small-M
// dense GEMM (kernels_gemv.cu). A warp reads 16-byte chunks of a few weight rows (lane l takes
// chunks l + 32 i, so every load instruction covers 512 contiguous bytes), issues all of a
// pass's loads before using any, multiplies them with activation chunks that stay in L1, and
// sums in fp32 over a fixed order (deterministic). Device code only; included by .cu files.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace strata::cuda {

// 16 bytes of a weight row: read once per call, so not kept in L1 (the activations are).
// kOrdered: volatile asm, so the compiler keeps the load ahead of a later griddepcontrol.wait.
template <bool kOrdered = false>
__device__ __forceinline__ uint4 LoadWeights(const __nv_bfloat16* p) {
  uint4 r;
  if constexpr (kOrdered) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
  }
  return r;
}

__device__ __forceinline__ float Dot8(const uint4& w, const uint4& v, float acc) {
  const __nv_bfloat162* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One pass of a warp over R weight rows: KP 16-byte chunks of each row per lane (chunks base,
// base + 32, ...), all loaded before any is used. kOrdered: LoadWeights<true>, for weights read
// before the predecessor's grid is done.
template <int R, int KP>
struct WeightPass {
  uint4 w[R][KP];
};

template <bool kOrdered = false, int R, int KP>
__device__ __forceinline__ void LoadPass(const __nv_bfloat16* const (&w)[R], int base, int chunks,
                                         WeightPass<R, KP>& pass) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int p = 0; p < KP; ++p) {
      const int q = base + 32 * p;
      uint4& d = pass.w[r][p];
      d = uint4{0, 0, 0, 0};
      if (w[r] != nullptr && q < chunks) d = LoadWeights<kOrdered>(w[r] + q * 8);
    }
  }
}

// acc[r][m] += the pass's chunks . the vectors' chunks (see DotRows).
template <int R, int M, int KP>
__device__ __forceinline__ void AccumulatePass(const WeightPass<R, KP>& pass,
                                               const __nv_bfloat16* v, int v_stride, int v_rows,
                                               int m_stride, int base, int chunks,
                                               float (&acc)[R][M]) {
#pragma unroll
  for (int p = 0; p < KP; ++p) {
    const int q = min(base + 32 * p, chunks - 1);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const __nv_bfloat16* row = v + min(r, v_rows - 1) * v_stride + q * 8;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const uint4 x = __ldg(reinterpret_cast<const uint4*>(row + m * m_stride));
        acc[r][m] = Dot8(pass.w[r][p], x, acc[r][m]);
      }
    }
  }
}

// acc[r][m] = w[r] . (v + min(r, v_rows - 1) * v_stride + m * m_stride) over `chunks` 16-byte
// chunks (8 bf16), summed over the warp (every lane gets the sums). Rows with w[r] == nullptr
// count as zeros. Each pass loads KP chunks of all R rows before using any. The arithmetic is
// branch-free: a chunk past the end reads the vectors' last chunk against zero weights. The
// vectors' offsets are 32-bit: R * v_stride + M * m_stride < 2^31 (callers check).
template <int R, int M, int KP>
__device__ __forceinline__ void DotRows(const __nv_bfloat16* const (&w)[R], const __nv_bfloat16* v,
                                        int v_stride, int v_rows, int m_stride, int chunks,
                                        float (&acc)[R][M]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
  for (int base = lane; base < chunks; base += 32 * KP) {
    WeightPass<R, KP> pass;
    LoadPass(w, base, chunks, pass);
    AccumulatePass(pass, v, v_stride, v_rows, m_stride, base, chunks, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = WarpSum(acc[r][m]);
  }
}

// DotRows whose first pass (LoadPass at base = lane) is already in `first`: the same sums.
template <int R, int M, int KP>
__device__ __forceinline__ void DotRowsFrom(const WeightPass<R, KP>& first,
                                            const __nv_bfloat16* const (&w)[R],
                                            const __nv_bfloat16* v, int v_stride, int v_rows,
                                            int m_stride, int chunks, float (&acc)[R][M]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  }
  if (lane < chunks) AccumulatePass(first, v, v_stride, v_rows, m_stride, lane, chunks, acc);
  for (int base = lane + 32 * KP; base < chunks; base += 32 * KP) {
    WeightPass<R, KP> pass;
    LoadPass(w, base, chunks, pass);
    AccumulatePass(pass, v, v_stride, v_rows, m_stride, base, chunks, acc);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = WarpSum(acc[r][m]);
  }
}

}  // namespace strata::cuda
