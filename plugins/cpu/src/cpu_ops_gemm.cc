// gemm: out[M, N] = x[M, K] * w[N, K]^T (+ bias) (+ out).
//
// Two paths. Decode-shaped products (few rows of x) are bound by reading w, and OpenBLAS's
// sgemm packs w first, which costs about twice the bandwidth of reading it (measured on a
// 2-core Xeon VM: M = 1 at 9.5 GB/s vs 20 GB/s for a streaming dot product). So small M goes
// through SkinnyGemmRows on the pool, which streams each weight row once from memory and reuses
// it from L2 for every group of 8 rows of x. Larger M goes to sgemm.

#include <algorithm>
#include <climits>
#include <cstring>

#include "cpu_backend.h"
#include "cpu_blas.h"
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "cpu_ops.h"
#include "strata/plugin_common/op_args.h"

namespace strata::cpu {
namespace {

// Up to this many rows of x the streaming kernel beats OpenBLAS's AVX2/AVX-512 sgemm kernels.
constexpr int64_t kSkinnyMaxM = 16;
// ... and up to this many when OpenBLAS did not recognise the CPU and fell back to its SSE3
// "Prescott" kernels (OpenBLAS 0.3.21 on Sapphire/Emerald Rapids), which run 3-4x slower.
constexpr int64_t kSkinnyMaxMWeakBlas = 64;
// A tile of w rows small enough to stay in L2 while every 8-row group of x passes over it.
constexpr int64_t kWeightTileFloats = 64 * 1024;
// Below this many multiply-adds a GEMM runs on the calling thread alone.
constexpr int64_t kInlineMacs = 1 << 16;

void SkinnyMatMul(CpuBackend& be, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                  const float* w, int64_t ldw, const float* bias, bool accumulate, float* out,
                  int64_t ldo) {
  const int64_t tile_rows = std::max<int64_t>(1, kWeightTileFloats / std::max<int64_t>(k, 1));
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t n0 = begin; n0 < end; n0 += tile_rows) {
      const int64_t n1 = std::min(end, n0 + tile_rows);
      for (int64_t r = 0; r < m; r += kSkinnyMaxRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kSkinnyMaxRows, m - r));
        SkinnyGemmRows(rows, x + r * ldx, ldx, k, w, ldw, n0, n1, bias, accumulate, out + r * ldo,
                       ldo);
      }
    }
  };
  const int64_t macs = m * n * std::max<int64_t>(k, 1);
  if (macs < kInlineMacs) {
    run(0, n);
    return;
  }
  const int64_t min_rows = std::max<int64_t>(1, kInlineMacs / (m * std::max<int64_t>(k, 1)));
  be.pool().ParallelFor(n, be.pool().GrainFor(n, min_rows), run);
}

// OpenBLAS path; sgemm runs its own threads, so this is called on the submitting thread.
void BlasMatMul(const Blas& blas, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                const float* w, int64_t ldw, const float* bias, bool accumulate, float* out,
                int64_t ldo) {
  float beta = accumulate ? 1.0f : 0.0f;
  if (bias != nullptr) {
    for (int64_t r = 0; r < m; ++r) {
      float* o = out + r * ldo;
      for (int64_t j = 0; j < n; ++j) o[j] = (accumulate ? o[j] : 0.0f) + bias[j];
    }
    beta = 1.0f;
  }
  if (k == 0) {
    if (beta == 0.0f) {
      for (int64_t r = 0; r < m; ++r) std::memset(out + r * ldo, 0, n * sizeof(float));
    }
    return;
  }
  blas.sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
             static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), w, static_cast<int>(ldw), beta,
             out, static_cast<int>(ldo));
}

Status CheckBlasDims(const char* op, const TensorView& x, const TensorView& w,
                     const TensorView& out) {
  for (int64_t v : {x.rows, x.cols, x.stride, w.rows, w.stride, out.stride}) {
    if (v > INT_MAX) return InvalidArgument(op, "a dimension or row stride exceeds INT_MAX");
  }
  return Status();
}

int64_t SkinnyMaxM(const Blas& blas) {
  static const int64_t max_m = [&blas] {
#if defined(__x86_64__)
    const char* core = blas.get_corename();
    if (__builtin_cpu_supports("avx2") && core != nullptr && std::strcmp(core, "Prescott") == 0) {
      return kSkinnyMaxMWeakBlas;
    }
#endif
    return kSkinnyMaxM;
  }();
  return max_m;
}

}  // namespace

void MatMulNT(CpuBackend& be, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
              const float* w, int64_t ldw, const float* bias, bool accumulate, float* out,
              int64_t ldo) {
  if (m == 0 || n == 0) return;
  if (m <= SkinnyMaxM(be.blas())) {
    SkinnyMatMul(be, m, n, k, x, ldx, w, ldw, bias, accumulate, out, ldo);
  } else {
    BlasMatMul(be.blas(), m, n, k, x, ldx, w, ldw, bias, accumulate, out, ldo);
  }
}

Status Gemm(CpuBackend& be, const strata_tensor* x, const strata_tensor* w,
            const strata_tensor* bias, int32_t accumulate, strata_tensor* out) {
  constexpr const char* kOp = "gemm";
  plugin_common::GemmArgs a;
  STRATA_PLUGIN_RETURN_IF_ERROR(plugin_common::CheckGemm(kFloatDtype, x, w, bias, out, &a));
  const TensorView &xv = a.x, &wv = a.w, &bv = a.bias, &ov = a.out;
  const int64_t m = a.m, k = a.k, n = a.n;
  STRATA_PLUGIN_RETURN_IF_ERROR(CheckBlasDims(kOp, xv, wv, ov));
  MatMulNT(be, m, n, k, xv.Row<float>(0), xv.stride, wv.Row<float>(0), wv.stride,
           bias != nullptr ? bv.Row<float>(0) : nullptr, accumulate != 0, ov.Row<float>(0),
           ov.stride);
  return Status();
}

Status GemmSiluMul(CpuBackend& be, const strata_tensor* x, const strata_tensor* w_gate_up,
                   const strata_tensor* bias, strata_tensor* scratch, strata_tensor* out) {
  plugin_common::GemmSiluMulArgs args;
  STRATA_PLUGIN_RETURN_IF_ERROR(
      plugin_common::CheckGemmSiluMul(STRATA_DTYPE_F32, x, w_gate_up, bias, scratch, out, &args));
  STRATA_PLUGIN_RETURN_IF_ERROR(Gemm(be, x, w_gate_up, bias, 0, scratch));
  return SiluMul(be, scratch, out);
}

}  // namespace strata::cpu
