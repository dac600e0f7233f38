#pragma once
// Helpers shared by the CUDA benchmarks (bench/cuda/*_bench.cc): error checks that exit, bf16
// conversion on the host, and the device-to-device copy bandwidth every table is a ratio of.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define BENCH_CHECK(expr)                                                \
  do {                                                                   \
    const cudaError_t err_ = (expr);                                     \
    if (err_ != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(err_));                            \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

namespace strata::cuda::bench {

// Round-to-nearest-even float -> bf16 bits.
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Median device-to-device copy bandwidth (read + write bytes / s, GB/s) of a 2 GiB buffer over
// 10 timed copies after 2 warm-ups.
inline double CopyBandwidthGBs() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK(cudaMalloc(&a, bytes));
  BENCH_CHECK(cudaMalloc(&b, bytes));
  BENCH_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    BENCH_CHECK(cudaEventRecord(e0));
    BENCH_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    BENCH_CHECK(cudaEventRecord(e1));
    BENCH_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    BENCH_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

// Median milliseconds per call of `call(i)` (i: the call's index within a batch, e.g. to rotate
// buffers) on the default stream: a 3-call warm-up, one call to size the batches, then `reps`
// batches of about `batch_ms` each (between min_calls and max_calls calls).
template <typename F>
float MedianMsPerCall(F call, float batch_ms, int min_calls, int max_calls, int reps) {
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  auto batch = [&](int n) {
    BENCH_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < n; ++i) call(i);
    BENCH_CHECK(cudaEventRecord(e1));
    BENCH_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / n;
  };
  batch(3);
  const float one = batch(1);
  const int calls =
      std::clamp(static_cast<int>(batch_ms / std::max(one, 1e-3f)), min_calls, max_calls);
  std::vector<float> ms;
  for (int rep = 0; rep < reps; ++rep) ms.push_back(batch(calls));
  std::sort(ms.begin(), ms.end());
  BENCH_CHECK(cudaEventDestroy(e0));
  BENCH_CHECK(cudaEventDestroy(e1));
  return ms[ms.size() / 2];
}

}  // namespace strata::cuda::bench
