// MoE layer on one GPU: the CUDA plugin's routing + expert kernels (PlanMoeExperts +
// LaunchMoeRouteExperts, the launchers the plugin's moe_route_experts calls, which the engine
// uses; at decode sizes the expert kernels route themselves),
// timed with CUDA events on Qwen3-30B-A3B (128 experts, top-8, hidden 2048, inter 768) and
// Mixtral-8x7B (8 experts, top-2, hidden 4096, inter 14336) layer shapes at 1, 8, 64, 512 and
// 4,096 tokens, random bf16 weights. torch_moe.py times PyTorch on the same shapes.
//
// Each call routes its own random logits (8 sets, used round robin, so successive calls touch
// different experts and a small shape is not served from the L2). Figures per shape: median
// time per call (route + experts; also the route kernel then the experts, as moe_route +
// moe_experts run them, and the experts alone, on routings made earlier);
// TFLOP/s = 2 x T x k x 3 x H x I / time; for decode-sized shapes the GB/s of expert weights
// actually touched (distinct experts per call x 3 x H x I x 2 bytes, averaged over the 8
// routings) over the device-copy bandwidth measured in the same run (cudaMemcpy D2D of 2 GiB,
// bytes read + written).
//
// Where the wgmma kernels (compute capability 9.0, prefill-sized groups) or the vector kernels
// (decode-sized calls) run, each such shape is also computed once with the mma.sync tile
// kernels on the same routing and the normalized L2 difference printed ("vs mma"); --kernel mma
// times the mma.sync tile kernels everywhere instead (the same-run baseline).
//
//     moe_bench [--quick] [--kernel auto|mma] [--tokens N,N,...]
//         prints a table and "CSV,..." lines for scripts/bench_cuda.sh
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/kernels/cuda_kernels.h"

namespace {

using strata::cuda::bench::CopyBandwidthGBs;
using strata::cuda::bench::FromBf16;
using strata::cuda::bench::ToBf16;

using strata::cuda::bf16;

struct Model {
  const char* name;
  int64_t experts, top_k, hidden, inter;
};

constexpr Model kModels[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768},
                             {"mixtral-8x7b", 8, 2, 4096, 14336}};
constexpr int kRoutings = 8;

// Fills `bytes` of device memory with uniform bf16 in [-scale, scale]: 1M random values copied
// once, then repeated by doubling device-to-device copies.
void FillRandom(void* dst, size_t bytes, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  const size_t pattern = std::min<size_t>(bytes, size_t{2} << 20);
  std::vector<uint16_t> host(pattern / 2);
  for (auto& v : host) v = ToBf16(dist(rng));
  BENCH_CHECK(cudaMemcpy(dst, host.data(), pattern, cudaMemcpyHostToDevice));
  for (size_t done = pattern; done < bytes; done *= 2) {
    BENCH_CHECK(cudaMemcpy(static_cast<char*>(dst) + done, dst, std::min(done, bytes - done),
                           cudaMemcpyDeviceToDevice));
  }
}

// Device buffers of one model: weights, and per-token-count activations and routing.
struct Buffers {
  bf16 *w_gate_up = nullptr, *w_down = nullptr, *x = nullptr, *out = nullptr;
  bf16* logits = nullptr;  // [kRoutings][tokens][experts]
  float* weights = nullptr;
  int32_t* ids = nullptr;  // [kRoutings][tokens][k]
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

struct Result {
  double us = 0, separate_us = 0, experts_us = 0, experts_touched = 0;
  double vs_mma = -1;  // ||ours - mma|| / ||mma|| on one routing, -1 when ours is the mma path
  const char* tiles = "";
};

std::vector<uint16_t> Output(const Model& m, int64_t tokens, const Buffers& b,
                             cudaStream_t stream) {
  std::vector<uint16_t> out(tokens * m.hidden);
  BENCH_CHECK(cudaStreamSynchronize(stream));
  BENCH_CHECK(cudaMemcpy(out.data(), b.out, out.size() * 2, cudaMemcpyDeviceToHost));
  return out;
}

// Routes all kRoutings logit sets once and counts the distinct experts of each.
double DistinctExperts(const Model& m, int64_t tokens, const Buffers& b, cudaStream_t stream) {
  std::vector<int32_t> ids(kRoutings * tokens * m.top_k);
  BENCH_CHECK(cudaStreamSynchronize(stream));
  BENCH_CHECK(cudaMemcpy(ids.data(), b.ids, ids.size() * 4, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int r = 0; r < kRoutings; ++r) {
    const auto first = ids.begin() + r * tokens * m.top_k;
    sum += std::set<int32_t>(first, first + tokens * m.top_k).size();
  }
  return sum / kRoutings;
}

strata::cuda::MoeExpertsArgs ExpertArgs(const Model& m, int64_t tokens, const Buffers& b, int r) {
  strata::cuda::MoeExpertsArgs a;
  a.x = b.x;
  a.x_stride = m.hidden;
  a.rows = tokens;
  a.hidden = m.hidden;
  a.inter = m.inter;
  a.experts = m.experts;
  a.top_k = m.top_k;
  a.topk_ids = b.ids + r * tokens * m.top_k;
  a.ids_stride = m.top_k;
  a.weights = b.weights + r * tokens * m.top_k;
  a.weights_stride = m.top_k;
  a.w_gate_up = b.w_gate_up;
  a.gate_up_expert_stride = 2 * m.inter * m.hidden;
  a.w_down = b.w_down;
  a.down_expert_stride = m.hidden * m.inter;
  a.out = b.out;
  a.out_stride = m.hidden;
  return a;
}

// One layer call on logits set r: kFused routes and runs the experts as moe_route_experts
// does; kSeparate launches the route kernel, then the experts (moe_route + moe_experts);
// kExpertsOnly reuses the routing of an earlier call.
enum class Mode { kFused, kSeparate, kExpertsOnly };
void Call(const Model& m, int64_t tokens, Buffers& b, int r, const strata::cuda::MoePlan& plan,
          cudaStream_t stream, Mode mode = Mode::kFused) {
  const strata::cuda::MoeExpertsArgs args = ExpertArgs(m, tokens, b, r);
  if (mode == Mode::kFused) {
    strata::cuda::MoeVectorRouting routing;
    routing.logits = b.logits + r * tokens * m.experts;
    routing.logits_stride = m.experts;
    routing.renormalize = true;
    BENCH_CHECK(strata::cuda::LaunchMoeRouteExperts(args, plan, routing, b.workspace, stream));
    return;
  }
  if (mode == Mode::kSeparate) {
    BENCH_CHECK(strata::cuda::LaunchMoeRoute(b.logits + r * tokens * m.experts, m.experts, tokens,
                                             m.experts, static_cast<int32_t>(m.top_k), true,
                                             b.weights + r * tokens * m.top_k, m.top_k,
                                             b.ids + r * tokens * m.top_k, m.top_k, stream));
  }
  BENCH_CHECK(strata::cuda::LaunchMoeExperts(args, plan, b.workspace, stream));
}

// Median over 7 repetitions of the time per call of `calls` back-to-back calls.
template <typename Fn>
double MedianUs(int calls, Fn call, cudaStream_t stream) {
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  std::vector<float> per_call;
  for (int rep = 0; rep < 7; ++rep) {
    BENCH_CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < calls; ++i) call(i);
    BENCH_CHECK(cudaEventRecord(e1, stream));
    BENCH_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    per_call.push_back(ms * 1e3f / calls);
  }
  BENCH_CHECK(cudaEventDestroy(e0));
  BENCH_CHECK(cudaEventDestroy(e1));
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

void EnsureWorkspace(Buffers& b, size_t bytes) {
  if (bytes <= b.workspace_bytes) return;
  BENCH_CHECK(cudaFree(b.workspace));
  BENCH_CHECK(cudaMalloc(&b.workspace, bytes));
  b.workspace_bytes = bytes;
}

Result TimeShape(const Model& m, int64_t tokens, Buffers& b, cudaStream_t stream) {
  strata::cuda::MoePlan plan;
  BENCH_CHECK(strata::cuda::PlanMoeExperts(ExpertArgs(m, tokens, b, 0), &plan));
  EnsureWorkspace(b, plan.workspace_bytes);
  for (int r = 0; r < kRoutings; ++r) Call(m, tokens, b, r, plan, stream);  // warm-up
  Result res;
  res.tiles = plan.tiles == strata::cuda::MoeTiles::kLarge    ? "large"
              : plan.tiles == strata::cuda::MoeTiles::kMedium ? "medium"
              : plan.tiles == strata::cuda::MoeTiles::kSmall  ? "small"
                                                              : "vector";
  res.experts_touched = DistinctExperts(m, tokens, b, stream);
  const int calls = tokens >= 512 ? 8 : 32;
  res.us = MedianUs(
      calls, [&](int i) { Call(m, tokens, b, i % kRoutings, plan, stream); }, stream);
  res.separate_us = MedianUs(
      calls, [&](int i) { Call(m, tokens, b, i % kRoutings, plan, stream, Mode::kSeparate); },
      stream);
  res.experts_us = MedianUs(
      calls, [&](int i) { Call(m, tokens, b, i % kRoutings, plan, stream, Mode::kExpertsOnly); },
      stream);
  const bool wgmma = plan.tiles == strata::cuda::MoeTiles::kLarge && strata::cuda::WgmmaAvailable();
  if (wgmma || plan.tiles == strata::cuda::MoeTiles::kVector) {
    // The same routing through the mma.sync tile kernels: the output difference.
    Call(m, tokens, b, 0, plan, stream, Mode::kExpertsOnly);
    const std::vector<uint16_t> ours = Output(m, tokens, b, stream);
    strata::cuda::SetWgmmaKernelsEnabled(false);
    strata::cuda::SetMoeVectorKernelsEnabled(false);
    strata::cuda::MoePlan mma_plan;
    BENCH_CHECK(strata::cuda::PlanMoeExperts(ExpertArgs(m, tokens, b, 0), &mma_plan));
    EnsureWorkspace(b, mma_plan.workspace_bytes);
    Call(m, tokens, b, 0, mma_plan, stream, Mode::kExpertsOnly);
    const std::vector<uint16_t> ref = Output(m, tokens, b, stream);
    strata::cuda::SetWgmmaKernelsEnabled(true);
    strata::cuda::SetMoeVectorKernelsEnabled(true);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double x = FromBf16(ours[i]), y = FromBf16(ref[i]);
      num += (x - y) * (x - y);
      den += y * y;
    }
    res.vs_mma = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    if (wgmma) res.tiles = "large (wgmma)";
  }
  return res;
}

// Output sanity: finite, not all zero (the conformance suite checks the values).
void CheckOutput(const Model& m, int64_t tokens, const Buffers& b) {
  std::vector<uint16_t> out(tokens * m.hidden);
  BENCH_CHECK(cudaMemcpy(out.data(), b.out, out.size() * 2, cudaMemcpyDeviceToHost));
  size_t nonzero = 0;
  for (uint16_t v : out) {
    if ((v & 0x7f80) == 0x7f80) {
      std::fprintf(stderr, "%s T=%lld: non-finite output\n", m.name,
                   static_cast<long long>(tokens));
      std::exit(1);
    }
    nonzero += (v & 0x7fff) != 0;
  }
  if (nonzero == 0) {
    std::fprintf(stderr, "%s T=%lld: output is all zero\n", m.name, static_cast<long long>(tokens));
    std::exit(1);
  }
}

void RunModel(const Model& m, const std::vector<int64_t>& token_counts, double copy,
              cudaStream_t stream) {
  Buffers b;
  const int64_t max_t = *std::max_element(token_counts.begin(), token_counts.end());
  const size_t gu_bytes = m.experts * 2 * m.inter * m.hidden * 2;
  const size_t dn_bytes = m.experts * m.hidden * m.inter * 2;
  BENCH_CHECK(cudaMalloc(&b.w_gate_up, gu_bytes));
  BENCH_CHECK(cudaMalloc(&b.w_down, dn_bytes));
  BENCH_CHECK(cudaMalloc(&b.x, max_t * m.hidden * 2));
  BENCH_CHECK(cudaMalloc(&b.out, max_t * m.hidden * 2));
  BENCH_CHECK(cudaMalloc(&b.logits, kRoutings * max_t * m.experts * 2));
  BENCH_CHECK(cudaMalloc(&b.weights, kRoutings * max_t * m.top_k * 4));
  BENCH_CHECK(cudaMalloc(&b.ids, kRoutings * max_t * m.top_k * 4));
  FillRandom(b.w_gate_up, gu_bytes, 1.0f / std::sqrt(static_cast<float>(m.hidden)), 1);
  FillRandom(b.w_down, dn_bytes, 1.0f / std::sqrt(static_cast<float>(m.inter)), 2);
  FillRandom(b.x, max_t * m.hidden * 2, 1.0f, 3);
  const double expert_bytes = 3.0 * m.hidden * m.inter * 2;
  for (int64_t tokens : token_counts) {
    FillRandom(b.logits, kRoutings * tokens * m.experts * 2, 4.0f,
               100 + static_cast<uint32_t>(tokens));
    const Result r = TimeShape(m, tokens, b, stream);
    CheckOutput(m, tokens, b);
    const double flops = 2.0 * tokens * m.top_k * 3.0 * m.hidden * m.inter;
    const double gbs = r.experts_touched * expert_bytes / (r.us * 1e-6) / 1e9;
    std::printf(
        "%-14s T %5lld: %9.1f us (route kernel + experts %9.1f, experts alone %9.1f) %6.1f "
        "TFLOP/s  experts %6.1f  weights %6.0f GB/s (%.2f of copy)  tiles %s  vs mma %s\n",
        m.name, static_cast<long long>(tokens), r.us, r.separate_us, r.experts_us,
        flops / (r.us * 1e-6) / 1e12, r.experts_touched, gbs, gbs / copy, r.tiles,
        r.vs_mma < 0 ? "-" : std::to_string(r.vs_mma).c_str());
    std::printf("CSV,ours,%s,%lld,%.2f,%.2f,%.1f,%.1f,%.3e,%.2f\n", m.name,
                static_cast<long long>(tokens), r.us, flops / (r.us * 1e-6) / 1e12,
                r.experts_touched, gbs, r.vs_mma, r.separate_us);
  }
  for (void* p : {static_cast<void*>(b.w_gate_up), static_cast<void*>(b.w_down),
                  static_cast<void*>(b.x), static_cast<void*>(b.out), static_cast<void*>(b.logits),
                  static_cast<void*>(b.weights), static_cast<void*>(b.ids), b.workspace}) {
    BENCH_CHECK(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<int64_t> tokens;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--kernel") == 0 && i + 1 < argc &&
               std::strcmp(argv[i + 1], "mma") == 0) {
      strata::cuda::SetWgmmaKernelsEnabled(false);
      strata::cuda::SetMoeVectorKernelsEnabled(false);
      ++i;
    } else if (std::strcmp(argv[i], "--kernel") == 0 && i + 1 < argc &&
               std::strcmp(argv[i + 1], "auto") == 0) {
      ++i;
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      for (const char* p = argv[++i]; *p != 0;) {
        char* end = nullptr;
        const long long t = std::strtoll(p, &end, 10);
        if (end == p || t <= 0 || (*end != 0 && *end != ',')) {
          std::fprintf(stderr, "moe_bench: --tokens wants positive counts separated by commas\n");
          return 2;
        }
        tokens.push_back(t);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: moe_bench [--quick] [--kernel auto|mma] [--tokens N,N,...]\n");
      return 2;
    }
  }
  if (tokens.empty()) {
    tokens = quick ? std::vector<int64_t>{1, 64, 4096} : std::vector<int64_t>{1, 8, 64, 512, 4096};
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, wgmma kernels %s\n", prop.name, prop.multiProcessorCount,
              strata::cuda::WgmmaAvailable() ? "on" : "off");
  const double copy = CopyBandwidthGBs();
  std::printf("# device copy (D2D 2 GiB, read+write): %.0f GB/s\nCSV,copy,%.1f\n", copy, copy);
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Model& m : kModels) RunModel(m, tokens, copy, stream);
  BENCH_CHECK(cudaStreamDestroy(stream));
  return 0;
}
