#include "cpu_kernels.h"

#include <cstring>

// Multiversioning: clones for x86-64-v4 (AVX-512), v3 (AVX2, FMA) and the baseline. Templates
// below are always_inline so that they are compiled inside each clone with its ISA.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(STRATA_CPU_NO_MULTIVERSION)
#define STRATA_CPU_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STRATA_CPU_MULTIVERSION
#endif
#define STRATA_CPU_INLINE inline __attribute__((always_inline))

namespace strata::cpu {
namespace {

// 16 floats: one AVX-512 register, two AVX2 registers, four SSE registers.
typedef float V16 __attribute__((vector_size(64)));
constexpr int kLanes = 16;

STRATA_CPU_INLINE V16 Load(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

STRATA_CPU_INLINE void Store(float* p, V16 v) { std::memcpy(p, &v, sizeof(v)); }

typedef int32_t I16 __attribute__((vector_size(64)));

// Pairwise tree: four shuffle+add steps instead of a 16-long dependent chain.
STRATA_CPU_INLINE float HorizontalSum(V16 v) {
  v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  return v[0];
}

// exp(x) for x <= 0 (softmax arguments), within 2 ulp of expf: x = n ln2 + r with |r| <= ln2/2,
// a degree-6 polynomial for e^r (Cephes' expf coefficients), then 2^n through the exponent
// bits. Arguments below -87 (including -inf) give 0 (exp(-87) = 1.6e-38).
STRATA_CPU_INLINE V16 ExpNonPositive(V16 x) {
  const V16 zero = {};
  const auto underflow = x < -87.0f;  // also true for -inf
  x = x < -87.0f ? zero - 87.0f : x;
  const V16 magic = zero + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const V16 n = (x * 1.44269504088896341f + magic) - magic;
  const V16 r = x - n * 0.693359375f + n * 2.12194440e-4f;
  V16 p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const V16 y = p * r * r + r + 1.0f;
  const I16 bits = (__builtin_convertvector(n, I16) + 127) << 23;
  V16 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return underflow ? zero : y * scale;
}

// dot products of M rows of x with one weight row, reading the weight row once.
template <int M>
STRATA_CPU_INLINE void DotRows(const float* x, int64_t ldx, int64_t k, const float* w,
                               float* dots) {
  V16 acc0[M] = {};
  V16 acc1[M] = {};
  int64_t i = 0;
  for (; i + 2 * kLanes <= k; i += 2 * kLanes) {
    const V16 w0 = Load(w + i);
    const V16 w1 = Load(w + i + kLanes);
    for (int r = 0; r < M; ++r) {
      acc0[r] += Load(x + r * ldx + i) * w0;
      acc1[r] += Load(x + r * ldx + i + kLanes) * w1;
    }
  }
  for (; i + kLanes <= k; i += kLanes) {
    const V16 w0 = Load(w + i);
    for (int r = 0; r < M; ++r) acc0[r] += Load(x + r * ldx + i) * w0;
  }
  for (int r = 0; r < M; ++r) {
    float tail = 0.0f;
    for (int64_t j = i; j < k; ++j) tail += x[r * ldx + j] * w[j];
    dots[r] = HorizontalSum(acc0[r] + acc1[r]) + tail;
  }
}

template <int M>
STRATA_CPU_INLINE void SkinnyRange(const float* x, int64_t ldx, int64_t k, const float* w,
                                   int64_t ldw, int64_t n_begin, int64_t n_end, const float* bias,
                                   bool accumulate, float* out, int64_t ldo) {
  for (int64_t n = n_begin; n < n_end; ++n) {
    float dots[M];
    DotRows<M>(x, ldx, k, w + n * ldw, dots);
    const float b = bias != nullptr ? bias[n] : 0.0f;
    for (int r = 0; r < M; ++r) {
      float* o = out + r * ldo + n;
      *o = dots[r] + b + (accumulate ? *o : 0.0f);
    }
  }
}

// Four dot products of length d sharing one key row: q rows are d apart.
STRATA_CPU_INLINE void Dot4(const float* q, int d, const float* k, float* out) {
  V16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    const V16 kv = Load(k + i);
    a0 += Load(q + i) * kv;
    a1 += Load(q + d + i) * kv;
    a2 += Load(q + 2 * d + i) * kv;
    a3 += Load(q + 3 * d + i) * kv;
  }
  float t[4] = {HorizontalSum(a0), HorizontalSum(a1), HorizontalSum(a2), HorizontalSum(a3)};
  for (; i < d; ++i) {
    for (int l = 0; l < 4; ++l) t[l] += q[l * d + i] * k[i];
  }
  for (int l = 0; l < 4; ++l) out[l] = t[l];
}

STRATA_CPU_INLINE float Dot(const float* a, const float* b, int d) {
  V16 a0 = {}, a1 = {};
  int i = 0;
  for (; i + 2 * kLanes <= d; i += 2 * kLanes) {
    a0 += Load(a + i) * Load(b + i);
    a1 += Load(a + i + kLanes) * Load(b + i + kLanes);
  }
  for (; i + kLanes <= d; i += kLanes) a0 += Load(a + i) * Load(b + i);
  float s = HorizontalSum(a0 + a1);
  for (; i < d; ++i) s += a[i] * b[i];
  return s;
}

// acc[0:W*16] += sum_t p[t] * v[t][0:W*16], the W accumulators kept in registers.
template <int W>
STRATA_CPU_INLINE void AccumulateColumns(const float* p, const float* v, int64_t v_stride,
                                         int tokens, float* acc) {
  V16 a[W];
  for (int j = 0; j < W; ++j) a[j] = Load(acc + j * kLanes);
  for (int t = 0; t < tokens; ++t) {
    const float pt = p[t];
    const float* vt = v + t * v_stride;
    for (int j = 0; j < W; ++j) a[j] += pt * Load(vt + j * kLanes);
  }
  for (int j = 0; j < W; ++j) Store(acc + j * kLanes, a[j]);
}

}  // namespace

STRATA_CPU_MULTIVERSION
float SumSquares(const float* x, int64_t n) {
  V16 a0 = {}, a1 = {};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const V16 x0 = Load(x + i);
    const V16 x1 = Load(x + i + kLanes);
    a0 += x0 * x0;
    a1 += x1 * x1;
  }
  float s = HorizontalSum(a0 + a1);
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

STRATA_CPU_MULTIVERSION
void SkinnyGemmRows(int m, const float* x, int64_t ldx, int64_t k, const float* w, int64_t ldw,
                    int64_t n_begin, int64_t n_end, const float* bias, bool accumulate, float* out,
                    int64_t ldo) {
  switch (m) {
#define STRATA_CPU_SKINNY_CASE(M)                                                  \
  case M:                                                                          \
    SkinnyRange<M>(x, ldx, k, w, ldw, n_begin, n_end, bias, accumulate, out, ldo); \
    break;
    STRATA_CPU_SKINNY_CASE(1)
    STRATA_CPU_SKINNY_CASE(2)
    STRATA_CPU_SKINNY_CASE(3)
    STRATA_CPU_SKINNY_CASE(4)
    STRATA_CPU_SKINNY_CASE(5)
    STRATA_CPU_SKINNY_CASE(6)
    STRATA_CPU_SKINNY_CASE(7)
    STRATA_CPU_SKINNY_CASE(8)
#undef STRATA_CPU_SKINNY_CASE
    default:
      break;
  }
}

STRATA_CPU_MULTIVERSION
void AttentionScores(const float* q, int lanes, int head_dim, const float* k, int64_t k_stride,
                     int tokens, float* scores) {
  for (int t = 0; t < tokens; ++t) {
    const float* kt = k + t * k_stride;
    int l = 0;
    for (; l + 4 <= lanes; l += 4) {
      float dots[4];
      Dot4(q + static_cast<int64_t>(l) * head_dim, head_dim, kt, dots);
      for (int j = 0; j < 4; ++j) scores[(l + j) * tokens + t] = dots[j];
    }
    for (; l < lanes; ++l) {
      scores[l * tokens + t] = Dot(q + static_cast<int64_t>(l) * head_dim, kt, head_dim);
    }
  }
}

STRATA_CPU_MULTIVERSION
void AttentionAccumulate(const float* p, int lanes, int head_dim, const float* v, int64_t v_stride,
                         int tokens, float* acc) {
  for (int l = 0; l < lanes; ++l) {
    const float* pl = p + l * tokens;
    float* al = acc + static_cast<int64_t>(l) * head_dim;
    int d = 0;
    for (; d + 4 * kLanes <= head_dim; d += 4 * kLanes) {
      AccumulateColumns<4>(pl, v + d, v_stride, tokens, al + d);
    }
    for (; d + kLanes <= head_dim; d += kLanes) {
      AccumulateColumns<1>(pl, v + d, v_stride, tokens, al + d);
    }
    for (; d < head_dim; ++d) {
      float s = al[d];
      for (int t = 0; t < tokens; ++t) s += pl[t] * v[t * v_stride + d];
      al[d] = s;
    }
  }
}

STRATA_CPU_MULTIVERSION
float ExpShiftSum(float* x, int n, float shift) {
  V16 sum = {};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V16 e = ExpNonPositive(Load(x + i) - shift);
    Store(x + i, e);
    sum += e;
  }
  if (i < n) {  // tail through a padded vector; padding is -inf, whose exp is 0
    V16 tail = V16{} - __builtin_inff();
    std::memcpy(&tail, x + i, (n - i) * sizeof(float));
    const V16 e = ExpNonPositive(tail - shift);
    std::memcpy(x + i, &e, (n - i) * sizeof(float));
    sum += e;
  }
  return HorizontalSum(sum);
}

}  // namespace strata::cpu
