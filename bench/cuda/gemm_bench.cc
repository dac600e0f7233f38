// Decode-shaped dense GEMMs on one GPU: what the plugin's `gemm` runs (cublasGemmEx, default
// algorithm, fp32 compute: out[M, N] = x[M, K] w[N, K]^T, bf16) against every algorithm
// cuBLASLt's heuristic offers for the same problem, timed side by side. Decode steps are
// weight-streaming: the figure of merit is the GB/s of weights (+ x and out) over the measured
// device-copy bandwidth, so this says how much of a decode step's GEMM time an algorithm
// choice could take back.
//
// It also times the plugin's own kernels on the same problem and checks their output against
// cuBLAS's: the weight-streaming GEMV (kernels_gemv.cu) for M <= 4 (`gemm` takes it for M <=
// kGemvGemmRows), the tensor-core one (kernels_skinny_gemm.cu) for larger M up to 64 where it
// serves, and on the gate_up shape the fused gemm_silu_mul against cuBLAS + silu_mul.
//
// Shapes: the projections of Llama-3.1-8B (qkv, o, gate_up, down, lm_head) and Qwen3-30B-A3B
// (qkv, o, router, lm_head) at M = 1, 2, 3, 4, 8, 16, 32, 64 rows. Each problem rotates over
// enough copies of its weight that the copies together exceed 4x the L2, so no call is served
// from the L2.
//
//     gemm_bench [--quick] [--rows 1,8,64] [--no-lt]
// --quick: M = 64 only; --rows: these M; --no-lt: skip the cuBLASLt candidates (the plugin's
// cuBLAS call and our kernels only).
// Output: a line per (shape, M) and "CSV,gemm,..." lines for scripts/bench_cuda.sh.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

using strata::cuda::bench::CopyBandwidthGBs;
using strata::cuda::bench::MedianMsPerCall;

#define BLAS_CHECK(expr)                                                        \
  do {                                                                          \
    const cublasStatus_t st_ = (expr);                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #expr, \
                   static_cast<int>(st_));                                      \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Shape {
  const char* model;
  const char* name;
  int n;
  int k;
};

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxAlgos = 16;
constexpr float kBatchMs = 10.0f;  // per timed batch of calls

// Runs cuBLAS and `ours` (a launcher of the plugin's kernel writing out) once each on (x, w)
// and returns the largest difference over the largest |cuBLAS| value.
template <typename Ours>
float OursDifference(cublasHandle_t blas, int m, const Shape& sh, void* x, void* w, void* out,
                     Ours ours_launch) {
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<uint16_t> ref(static_cast<size_t>(m) * sh.n), ours(ref.size());
  BLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, m, sh.k, &alpha, w, CUDA_R_16BF,
                          sh.k, x, CUDA_R_16BF, sh.k, &beta, out, CUDA_R_16BF, sh.n,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  BENCH_CHECK(cudaMemcpy(ref.data(), out, ref.size() * 2, cudaMemcpyDeviceToHost));
  BENCH_CHECK(ours_launch());
  BENCH_CHECK(cudaMemcpy(ours.data(), out, ours.size() * 2, cudaMemcpyDeviceToHost));
  float max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = bench::FromBf16(ref[i]), o = bench::FromBf16(ours[i]);
    max_ref = std::max(max_ref, std::abs(r));
    max_diff = std::max(max_diff, std::abs(r - o));
  }
  return max_diff / std::max(max_ref, 1e-30f);
}

// Random bf16 in [-1, 1) (fixed seed): uniform inputs would hide a misplaced row or column.
void FillRandom(void* p, size_t elements, uint32_t seed) {
  std::vector<uint16_t> host(elements);
  for (uint16_t& v : host) {
    seed = seed * 1664525u + 1013904223u;
    const float f = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v = static_cast<uint16_t>(bits >> 16);
  }
  BENCH_CHECK(cudaMemcpy(p, host.data(), elements * 2, cudaMemcpyHostToDevice));
}

int Main(int argc, char** argv) {
  bool quick = false, lt_candidates = true;
  std::vector<int> rows_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--no-lt") {
      lt_candidates = false;
    } else if (arg == "--rows" && i + 1 < argc) {
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) {
          std::fprintf(stderr, "gemm_bench: --rows wants a comma-separated list of 1..4096\n");
          return 2;
        }
        rows_arg.push_back(static_cast<int>(v));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: gemm_bench [--quick] [--rows 1,8,64] [--no-lt]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy = CopyBandwidthGBs();
  std::printf("# %s, %d SMs, L2 %d MB, device copy %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, copy);
  std::printf("CSV,copy,%.1f\n", copy);
  const Shape shapes[] = {
      {"llama3.1-8b", "qkv", 6144, 4096},         {"llama3.1-8b", "o", 4096, 4096},
      {"llama3.1-8b", "gate_up", 28672, 4096},    {"llama3.1-8b", "down", 4096, 14336},
      {"llama3.1-8b", "lm_head", 128256, 4096},   {"qwen3-30b-a3b", "qkv", 5120, 2048},
      {"qwen3-30b-a3b", "o", 2048, 4096},         {"qwen3-30b-a3b", "router", 128, 2048},
      {"qwen3-30b-a3b", "lm_head", 151936, 2048},
  };
  const std::vector<int> ms_rows = !rows_arg.empty() ? rows_arg
                                   : quick           ? std::vector<int>{64}
                                                     : std::vector<int>{1, 2, 3, 4, 8, 16, 32, 64};
  cublasHandle_t blas;
  BLAS_CHECK(cublasCreate(&blas));
  cublasLtHandle_t lt;
  BLAS_CHECK(cublasLtCreate(&lt));
  void* workspace = nullptr;
  BENCH_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  const int max_m = *std::max_element(ms_rows.begin(), ms_rows.end());
  for (const Shape& sh : shapes) {
    const size_t w_bytes = size_t{2} * sh.n * sh.k;
    const int copies = static_cast<int>(
        std::clamp<size_t>(4 * static_cast<size_t>(prop.l2CacheSize) / w_bytes + 1, 1, 64));
    std::vector<void*> w(copies);
    for (void*& p : w) {
      BENCH_CHECK(cudaMalloc(&p, w_bytes));
      BENCH_CHECK(cudaMemset(p, 0x3c, w_bytes));  // bf16 ~0.0117: finite products
    }
    void *x = nullptr, *out = nullptr;
    BENCH_CHECK(cudaMalloc(&x, size_t{2} * max_m * sh.k));
    FillRandom(x, size_t{1} * max_m * sh.k, 7);
    FillRandom(w[0], size_t{1} * sh.n * sh.k, 11);  // w[0] is the one compared with cuBLAS
    BENCH_CHECK(cudaMalloc(&out, size_t{2} * max_m * sh.n));
    bf16* silu_out = nullptr;
    BENCH_CHECK(cudaMalloc(&silu_out, size_t{2} * max_m * sh.n / 2));
    for (int m : ms_rows) {
      const float alpha = 1.0f, beta = 0.0f;
      const double bytes = static_cast<double>(w_bytes) + 2.0 * m * sh.k + 2.0 * m * sh.n;
      // What the plugin runs (cuda_ops_dense.cc GemmNT): column-major out^T = w^T-as-A * x^T.
      const float gemmex_ms = MedianMsPerCall(
          [&](int i) {
            BLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, m, sh.k, &alpha,
                                    w[i % copies], CUDA_R_16BF, sh.k, x, CUDA_R_16BF, sh.k, &beta,
                                    out, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
          },
          kBatchMs, 4, 400, 5);
      // The plugin's kernels for decode-sized M, each with its largest difference from cuBLAS:
      // the GEMV up to kGemvMaxRows rows, the tensor-core kernel wherever its tiles fit one wave
      // (at any M up to 64, though `gemm` takes it only above kGemvGemmRows).
      const bf16* xb = static_cast<const bf16*>(x);
      bf16* ob = static_cast<bf16*>(out);
      struct Ours {
        float ms = 0, err = 0;
      } gemv, skinny, skinny_mma;
      auto time_ours = [&](auto launch) {
        Ours o;
        o.ms = MedianMsPerCall(
            [&](int i) { BENCH_CHECK(launch(static_cast<const bf16*>(w[i % copies]))); }, kBatchMs,
            4, 400, 5);
        o.err = OursDifference(blas, m, sh, x, w[0], out,
                               [&] { return launch(static_cast<const bf16*>(w[0])); });
        return o;
      };
      if (m <= kGemvMaxRows) {
        gemv = time_ours([&](const bf16* wb) {
          return LaunchGemv(m, sh.n, sh.k, xb, sh.k, wb, sh.k, nullptr, false, ob, sh.n,
                            /*early_weights=*/true, nullptr);
        });
      }
      // (The plugin's `gemm` takes it where SkinnyGemmServes: marked "skinny*".)
      const bool one_wave = (sh.n + 127) / 128 <= 2 * prop.multiProcessorCount;
      const bool served = SkinnyGemmServes(m, sh.n, sh.k, xb, sh.k, xb, sh.k);
      if (one_wave && m <= kSkinnyGemmRows) {
        auto launch = [&](const bf16* wb) {
          return LaunchSkinnyGemm(m, sh.n, sh.k, xb, sh.k, wb, sh.k, nullptr, false, ob, sh.n,
                                  /*early_weights=*/true, nullptr);
        };
        skinny = time_ours(launch);
        if (m > 16) {  // wgmma above 16 rows: the mma.sync kernel on the same rows
          SetSkinnyWgmmaEnabled(false);
          skinny_mma = time_ours(launch);
          SetSkinnyWgmmaEnabled(true);
        }
      }
      // gemm_silu_mul on the gate_up shape: the fused kernel against cuBLAS + silu_mul (what the
      // plugin ran before it), both into bf16.
      float silu_ms = 0, cublas_silu_ms = 0;
      if (std::strcmp(sh.name, "gate_up") == 0 && m > kGemvGemmRows && one_wave &&
          m <= kSkinnyGemmRows) {
        const int inter = sh.n / 2;
        silu_ms = MedianMsPerCall(
            [&](int i) {
              BENCH_CHECK(LaunchSkinnyGemmSiluMul(m, inter, sh.k, xb, sh.k,
                                                  static_cast<const bf16*>(w[i % copies]), sh.k,
                                                  nullptr, silu_out, inter,
                                                  /*early_weights=*/true, nullptr));
            },
            kBatchMs, 4, 400, 5);
        cublas_silu_ms = MedianMsPerCall(
            [&](int i) {
              BLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, sh.n, m, sh.k, &alpha,
                                      w[i % copies], CUDA_R_16BF, sh.k, x, CUDA_R_16BF, sh.k, &beta,
                                      out, CUDA_R_16BF, sh.n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
              BENCH_CHECK(LaunchSiluMul(ob, sh.n, m, inter, silu_out, inter, nullptr));
            },
            kBatchMs, 4, 400, 5);
      }
      // cuBLASLt: the same problem, every heuristic candidate.
      cublasLtMatmulDesc_t desc;
      BLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      BLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      BLAS_CHECK(
          cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      cublasLtMatrixLayout_t la, lb, lc;
      BLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.k, sh.n, sh.k));
      BLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.k, m, sh.k));
      BLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, sh.n, m, sh.n));
      cublasLtMatmulPreference_t pref;
      BLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      BLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref,
                                                      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &kWorkspaceBytes, sizeof(kWorkspaceBytes)));
      cublasLtMatmulHeuristicResult_t results[kMaxAlgos];
      int found = 0;
      BLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, kMaxAlgos, results,
                                                &found));
      float first_ms = 0, best_ms = 1e30f;
      int best = -1;
      for (int a = 0; a < (lt_candidates ? found : 0); ++a) {
        const float t = MedianMsPerCall(
            [&](int i) {
              BLAS_CHECK(cublasLtMatmul(lt, desc, &alpha, w[i % copies], la, x, lb, &beta, out, lc,
                                        out, lc, &results[a].algo, workspace, kWorkspaceBytes,
                                        nullptr));
            },
            kBatchMs, 4, 400, 5);
        if (a == 0) first_ms = t;
        if (t < best_ms) best_ms = t, best = a;
      }
      if (best < 0) best_ms = 0;  // --no-lt
      BLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
      BLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
      BLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
      BLAS_CHECK(cublasLtMatrixLayoutDestroy(lc));
      BLAS_CHECK(cublasLtMatmulDescDestroy(desc));
      auto gbs = [&](float ms) { return bytes / (ms * 1e-3) / 1e9; };
      std::printf(
          "%-14s %-8s M %3d  GemmEx %8.1f us %6.0f GB/s (%.2f of copy)  Lt#0 %8.1f us "
          "%.2f  Lt best (#%d of %d) %8.1f us %.2f",
          sh.model, sh.name, m, gemmex_ms * 1e3, gbs(gemmex_ms), gbs(gemmex_ms) / copy,
          first_ms * 1e3, gbs(first_ms) / copy, best, found, best_ms * 1e3, gbs(best_ms) / copy);
      // Differences: max |ours - cuBLAS| / max |cuBLAS|.
      if (gemv.ms > 0) {
        std::printf("  gemv %8.1f us %.2f (diff %.1e)", gemv.ms * 1e3, gbs(gemv.ms) / copy,
                    gemv.err);
      }
      if (skinny.ms > 0) {
        std::printf("  skinny%s %8.1f us %.2f (diff %.1e)", served ? "*" : "", skinny.ms * 1e3,
                    gbs(skinny.ms) / copy, skinny.err);
      }
      if (skinny_mma.ms > 0) {
        std::printf("  skinny mma.sync %8.1f us %.2f (diff %.1e)", skinny_mma.ms * 1e3,
                    gbs(skinny_mma.ms) / copy, skinny_mma.err);
      }
      if (silu_ms > 0) {
        std::printf("  | gemm_silu_mul: fused %8.1f us %.2f, cuBLAS + silu_mul %8.1f us %.2f",
                    silu_ms * 1e3, gbs(silu_ms) / copy, cublas_silu_ms * 1e3,
                    gbs(cublas_silu_ms) / copy);
      }
      std::printf("\n");
      std::printf("CSV,gemm,%s,%s,%d,%d,%d,%.2f,%.2f,%.2f,%d,%d,%.2f,%.2f,%.2f,%.2f\n", sh.model,
                  sh.name, m, sh.n, sh.k, gemmex_ms * 1e3, first_ms * 1e3, best_ms * 1e3, best,
                  found, gemv.ms * 1e3, skinny.ms * 1e3, silu_ms * 1e3, cublas_silu_ms * 1e3);
      std::fflush(stdout);
    }
    for (void* p : w) BENCH_CHECK(cudaFree(p));
    BENCH_CHECK(cudaFree(x));
    BENCH_CHECK(cudaFree(out));
    BENCH_CHECK(cudaFree(silu_out));
  }
  BENCH_CHECK(cudaFree(workspace));
  BLAS_CHECK(cublasLtDestroy(lt));
  BLAS_CHECK(cublasDestroy(blas));
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::Main(argc, argv); }
