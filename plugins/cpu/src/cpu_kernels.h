#pragma once
// The CPU plugin's hot inner loops. On x86-64 with GCC each is compiled for AVX-512, AVX2+FMA
// and baseline SSE2, and the best one is picked when the plugin loads (function multiversioning),
// so one binary runs anywhere and still uses the wide vector units where they exist.
#include <cstdint>

// Hidden explicitly: GCC exports target_clones dispatchers despite -fvisibility=hidden.
#pragma GCC visibility push(hidden)
namespace strata::cpu {

// Largest row count SkinnyGemmRows handles.
inline constexpr int kSkinnyMaxRows = 8;

// sum(x[i]^2) for i < n, accumulated in fp32.
float SumSquares(const float* x, int64_t n);

// For m <= kSkinnyMaxRows rows of x [m, k] (row stride ldx) and weight rows
// [n_begin, n_end) of w [*, k] (row stride ldw):
//   out[i, j] = dot(x[i], w[j]) + (bias ? bias[j] : 0) + (accumulate ? out[i, j] : 0).
// Reads each weight row once for all m rows: the decode-shaped GEMM is bound by reading w.
void SkinnyGemmRows(int m, const float* x, int64_t ldx, int64_t k, const float* w, int64_t ldw,
                    int64_t n_begin, int64_t n_end, const float* bias, bool accumulate, float* out,
                    int64_t ldo);

// scores[l * tokens + t] = dot(q[l * head_dim ...], k[t * k_stride ...]) for `lanes` query
// vectors (dense, head_dim apart) and `tokens` key vectors.
void AttentionScores(const float* q, int lanes, int head_dim, const float* k, int64_t k_stride,
                     int tokens, float* scores);

// acc[l * head_dim + d] += sum_t p[l * tokens + t] * v[t * v_stride + d].
void AttentionAccumulate(const float* p, int lanes, int head_dim, const float* v, int64_t v_stride,
                         int tokens, float* acc);

// x[i] = exp(x[i] - shift) for i < n, returning the sum; for softmax, where every x[i] <= shift
// (x[i] may be -inf). Within 2 ulp of expf.
float ExpShiftSum(float* x, int n, float shift);

}  // namespace strata::cpu
#pragma GCC visibility pop
