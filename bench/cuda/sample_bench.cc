// Sampling a decode step's logits: on the device (the CUDA plugin's `sample` kernel, LaunchSample:
// a cluster of 8 blocks per row; and LaunchSampleOneBlock, the one-block-per-row kernel it
// replaced) against what the engine does without it (copy the bf16 logits rows to the host,
// widen them to float, and run the host rule, plugin_common::SampleRow, row after row on one
// thread), same rows, same parameters, same run. Vocabularies of Llama 3 (128,256) and Qwen3
// (151,936) at batch 1, 8, 64; modes: greedy, temperature + top-p, top-k + top-p + min-p, and
// top-p with 5 logprobs.
//
// Device: median of 30 launches (10 with --quick; CUDA events). Host: median of 5 (1 with
// --quick; steady_clock), from the start of the copy to the last id. Both kernels' ids are
// checked against the host rule's on every row (a mismatch is printed and fails the run).
//
//     sample_bench [--quick]        prints a table and "CSV,..." lines
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/kernels/cuda_kernels.h"
#include "strata/plugin_common/sampling.h"

namespace {

using strata::cuda::bench::FromBf16;
using strata::cuda::bench::ToBf16;

struct Mode {
  const char* name;
  strata_sample_params params;
};

strata_sample_params Params(float temperature, int top_k, float top_p, float min_p, int logprobs) {
  strata_sample_params p{};
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.num_logprobs = logprobs;
  return p;
}

const Mode kModes[] = {
    {"greedy", Params(0.0f, 0, 1.0f, 0.0f, -1)},
    {"T0.8 top-p0.9", Params(0.8f, 0, 0.9f, 0.0f, -1)},
    {"top-k50 top-p0.95 min-p0.05", Params(1.0f, 50, 0.95f, 0.05f, -1)},
    {"top-p0.9 logprobs5", Params(1.0f, 0, 0.9f, 0.0f, 5)},
};

// A language-model-like row: a long tail in [-6, 2) and a few tokens lifted by 6-10.
std::vector<uint16_t> Logits(int64_t rows, int64_t vocab, std::mt19937& rng) {
  std::uniform_real_distribution<float> tail(-6.0f, 2.0f), lift(6.0f, 10.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  std::vector<uint16_t> out(static_cast<size_t>(rows * vocab));
  for (auto& v : out) v = ToBf16(tail(rng) + (pick(rng) < 2 ? lift(rng) : 0.0f));
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double device_us = 0, one_block_us = 0, host_us = 0;
  int mismatches = 0;
};

Result Run(int64_t rows, int64_t vocab, const Mode& mode, int reps, int host_reps,
           std::mt19937& rng) {
  const std::vector<uint16_t> host_logits = Logits(rows, vocab, rng);
  std::vector<strata_sample_params> params(rows, mode.params);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (auto& p : params) p.uniform = u01(rng);
  void *d_logits, *d_params, *d_tokens, *d_lp, *d_top;
  const size_t logit_bytes = host_logits.size() * sizeof(uint16_t);
  BENCH_CHECK(cudaMalloc(&d_logits, logit_bytes));
  BENCH_CHECK(cudaMalloc(&d_params, rows * sizeof(strata_sample_params)));
  BENCH_CHECK(cudaMalloc(&d_tokens, rows * sizeof(int32_t)));
  BENCH_CHECK(cudaMalloc(&d_lp, rows * (1 + STRATA_MAX_LOGPROBS) * sizeof(float)));
  BENCH_CHECK(cudaMalloc(&d_top, rows * STRATA_MAX_LOGPROBS * sizeof(int32_t)));
  BENCH_CHECK(cudaMemcpy(d_logits, host_logits.data(), logit_bytes, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(d_params, params.data(), rows * sizeof(strata_sample_params),
                         cudaMemcpyHostToDevice));
  bool one_block = false;
  auto launch = [&] {
    auto* kernel = one_block ? strata::cuda::LaunchSampleOneBlock : strata::cuda::LaunchSample;
    BENCH_CHECK(kernel(
        d_logits, false, vocab, rows, vocab, static_cast<const strata_sample_params*>(d_params),
        static_cast<int32_t*>(d_tokens), static_cast<float*>(d_lp), 1 + STRATA_MAX_LOGPROBS,
        static_cast<int32_t*>(d_top), STRATA_MAX_LOGPROBS, nullptr));
  };
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  // Each kernel's median time and its ids (the cluster path first, then the one-block one).
  auto time = [&](std::vector<int32_t>* ids) {
    for (int i = 0; i < 3; ++i) launch();
    std::vector<double> dev;
    for (int i = 0; i < reps; ++i) {
      BENCH_CHECK(cudaEventRecord(e0));
      launch();
      BENCH_CHECK(cudaEventRecord(e1));
      BENCH_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      dev.push_back(ms * 1e3);
    }
    ids->resize(rows);
    BENCH_CHECK(cudaMemcpy(ids->data(), d_tokens, rows * sizeof(int32_t), cudaMemcpyDeviceToHost));
    return Median(dev);
  };
  std::vector<int32_t> device_ids, one_block_ids;
  const double device_us = time(&device_ids);
  one_block = true;
  const double one_block_us = time(&one_block_ids);
  // The engine's path without the entry: logits to a host vector, widened, sampled row by row.
  std::vector<double> host;
  std::vector<int32_t> host_ids(rows);
  for (int i = 0; i < host_reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint16_t> half(host_logits.size());
    BENCH_CHECK(cudaMemcpy(half.data(), d_logits, logit_bytes, cudaMemcpyDeviceToHost));
    std::vector<float> row(static_cast<size_t>(vocab));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < vocab; ++j) row[j] = FromBf16(half[r * vocab + j]);
      std::vector<float> raw;
      if (params[r].num_logprobs >= 0) raw = row;
      host_ids[r] = strata::plugin_common::SampleRow(row.data(), vocab, params[r]);
      if (params[r].num_logprobs >= 0) {
        float chosen;
        int32_t ids[STRATA_MAX_LOGPROBS];
        float lps[STRATA_MAX_LOGPROBS];
        strata::plugin_common::RowLogprobs(raw.data(), vocab, host_ids[r],
                                           params[r].num_logprobs, &chosen, ids, lps);
      }
    }
    host.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  Result res;
  res.device_us = device_us;
  res.one_block_us = one_block_us;
  res.host_us = Median(host);
  for (int64_t r = 0; r < rows; ++r) {
    if (device_ids[r] != host_ids[r] || one_block_ids[r] != host_ids[r]) {
      ++res.mismatches;
      std::fprintf(stderr,
                   "MISMATCH rows=%ld vocab=%ld mode=%s row %ld: cluster %d one-block %d host %d\n",
                   static_cast<long>(rows), static_cast<long>(vocab), mode.name,
                   static_cast<long>(r), device_ids[r], one_block_ids[r], host_ids[r]);
    }
  }
  for (void* p : {d_logits, d_params, d_tokens, d_lp, d_top}) BENCH_CHECK(cudaFree(p));
  BENCH_CHECK(cudaEventDestroy(e0));
  BENCH_CHECK(cudaEventDestroy(e1));
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "sample_bench on %s: device `sample` kernel (cluster per row; one block per row) vs logits "
      "copy + host rule\n\n",
      prop.name);
  std::printf("%6s %7s  %-28s %11s %12s %11s %11s %9s\n", "batch", "vocab", "mode", "device us",
              "one-block us", "one-blk/dev", "host us", "host/dev");
  std::mt19937 rng(1234);
  int mismatches = 0;
  for (int64_t vocab : {int64_t{128256}, int64_t{151936}}) {
    for (int64_t rows : {int64_t{1}, int64_t{8}, int64_t{64}}) {
      for (const Mode& mode : kModes) {
        const Result r = Run(rows, vocab, mode, quick ? 10 : 30, quick ? 1 : 5, rng);
        mismatches += r.mismatches;
        std::printf("%6ld %7ld  %-28s %11.1f %12.1f %11.2f %11.1f %9.1f\n", static_cast<long>(rows),
                    static_cast<long>(vocab), mode.name, r.device_us, r.one_block_us,
                    r.one_block_us / r.device_us, r.host_us, r.host_us / r.device_us);
        std::printf("CSV,%ld,%ld,%s,%.2f,%.2f,%.2f\n", static_cast<long>(rows),
                    static_cast<long>(vocab), mode.name, r.device_us, r.one_block_us, r.host_us);
      }
    }
  }
  std::printf("\nid mismatches between the kernels and the host rule: %d\n", mismatches);
  return mismatches == 0 ? 0 : 1;
}
