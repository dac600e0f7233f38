// Prefill attention on one GPU: the CUDA plugin's flash kernel (LaunchPrefillAttention, the
// launcher attention_prefill calls), timed with CUDA events, causal, head_dim 128, bf16,
// block_size 16, Llama-3.1-8B (32 q / 8 kv heads) and Qwen3-30B-A3B (32 / 4) head shapes.
//
// Shapes: one sequence of N new tokens (no prefix), N in {1k, 2k, 4k, 8k, 16k}: the shapes
// torch_sdpa_prefill.py times with PyTorch SDPA (flash backend). Two more, ours only: a chunk of
// 4k tokens after a 12k cached prefix, and a batch of 8 sequences of 512..3.5k tokens with
// prefixes. TFLOP/s = 4 x head_dim x q_heads x (visible query-key pairs) over the median time
// per call (for N tokens, no prefix: N (N + 1) / 2 pairs, the usual 2 N^2 D H counting).
//
// Checks: every shape but the 16k ones against the plugin's general kernel (LaunchAttention,
// normalized L2 error printed, NaN-poisoned outputs so an unwritten element fails). With
// --dump DIR, the 2k-token shapes also write q, dense K and V [N, Hk, 128] and our output as raw
// bf16 files for torch_sdpa_prefill.py --check DIR, which compares against an fp32 reference
// and against SDPA on the same inputs.
//
//   prefill_attention_bench [--quick] [--dump DIR] [--kernel auto|wgmma|wgmma-cp|mma]
//     --quick: 1k and 8k tokens only
//     --kernel: which kernel LaunchPrefillAttention's choice is replaced with (default auto:
//               wgmma on compute capability 9.0, else mma; wgmma-cp: the wgmma kernel with
//               K/V loaded by cp.async from every thread instead of by a TMA producer warp);
//               the CSV lines name it
// Output: a readable line per shape and "CSV,ours,..." lines for scripts/bench_cuda.sh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/kernels/cuda_kernels.h"

namespace strata::cuda {
namespace {

using strata::cuda::bench::CopyBandwidthGBs;
using strata::cuda::bench::MedianMsPerCall;
using strata::cuda::bench::FromBf16;
using strata::cuda::bench::ToBf16;

constexpr int kHeadDim = 128;

// The kernel under test (--kernel) and its name in the output.
cudaError_t (*g_launch)(const AttentionArgs&, cudaStream_t) = LaunchPrefillAttention;
const char* g_kernel = "auto";
constexpr int kBlockSize = 16;
constexpr double kMaxCheckPairs = 6e7;  // the general kernel is slow: skip 16k

struct Model {
  const char* name;
  int q_heads;
  int kv_heads;
};

struct Seq {
  int q_len;
  int kv_len;
};

struct Shape {
  Model model;
  std::string label;  // "N" for the SDPA-comparable shapes
  std::vector<Seq> seqs;
};

// Random bf16 in [-amp, amp] (a cheap generator: tens of millions of values per shape).
std::vector<uint16_t> RandomBf16(size_t n, float amp, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& h : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);
    h = ToBf16(amp * (2.0f * u - 1.0f));
  }
  return v;
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  T* dev = nullptr;
  BENCH_CHECK(cudaMalloc(&dev, std::max<size_t>(host.size(), 1) * sizeof(T)));
  BENCH_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(data, 1, bytes, f) != bytes) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

// Device buffers of one shape: a one-layer pool whose blocks are scattered by a random
// permutation, dense host copies of K and V (sequence-major), q, out and ref.
struct Setup {
  std::vector<uint16_t> k_dense, v_dense, q_host;
  void *pool = nullptr, *q = nullptr, *out = nullptr, *ref = nullptr;
  int32_t *q_start = nullptr, *kv_len = nullptr, *tables = nullptr;
  AttentionArgs args;
  int64_t rows = 0;
  double pairs = 0;
};

Setup Prepare(const Shape& sh, uint64_t seed) {
  Setup st;
  const int hk = sh.model.kv_heads, hq = sh.model.q_heads;
  int max_blocks = 0;
  int64_t total_kv = 0;
  std::vector<int32_t> q_start = {0}, kv_len;
  for (const Seq& s : sh.seqs) {
    max_blocks = std::max(max_blocks, (s.kv_len + kBlockSize - 1) / kBlockSize);
    total_kv += s.kv_len;
    q_start.push_back(q_start.back() + s.q_len);
    kv_len.push_back(s.kv_len);
    for (int j = 0; j < s.q_len; ++j) st.pairs += s.kv_len - s.q_len + j + 1;
  }
  st.rows = q_start.back();
  const int n = static_cast<int>(sh.seqs.size());
  const int64_t num_blocks = int64_t{n} * max_blocks;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t token = int64_t{hk} * kHeadDim, plane = kBlockSize * token;
  st.k_dense = RandomBf16(total_kv * token, 1.0f, seed + 1);
  st.v_dense = RandomBf16(total_kv * token, 1.0f, seed + 2);
  std::vector<uint16_t> pool(num_blocks * 2 * plane, 0);
  int64_t dense_row = 0;
  for (int s = 0; s < n; ++s) {
    for (int p = 0; p < sh.seqs[s].kv_len; ++p, ++dense_row) {
      const int64_t block = perm[int64_t{s} * max_blocks + p / kBlockSize];
      uint16_t* k = pool.data() + block * 2 * plane + (p % kBlockSize) * token;
      std::memcpy(k, st.k_dense.data() + dense_row * token, token * 2);
      std::memcpy(k + plane, st.v_dense.data() + dense_row * token, token * 2);
    }
  }
  st.pool = Upload(pool);
  st.q_host = RandomBf16(st.rows * hq * kHeadDim, 2.0f, seed + 3);
  st.q = Upload(st.q_host);
  BENCH_CHECK(cudaMalloc(&st.out, st.q_host.size() * 2));
  BENCH_CHECK(cudaMalloc(&st.ref, st.q_host.size() * 2));
  st.q_start = Upload(q_start);
  st.kv_len = Upload(kv_len);
  st.tables = Upload(perm);
  AttentionArgs& a = st.args;
  a.q = static_cast<const bf16*>(st.q);
  a.q_stride = int64_t{hq} * kHeadDim;
  a.out = static_cast<bf16*>(st.out);
  a.out_stride = a.q_stride;
  a.rows = st.rows;
  a.q_heads = hq;
  a.cache = static_cast<const bf16*>(st.pool);
  a.dims = CacheDims{num_blocks, 1, kBlockSize, hk, kHeadDim};
  a.layer = 0;
  a.q_start = st.q_start;
  a.kv_len = st.kv_len;
  a.block_tables = st.tables;
  a.num_seqs = n;
  a.max_blocks_per_seq = max_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  return st;
}

void Release(Setup& st) {
  for (void* p : {st.pool, st.q, st.out, st.ref, static_cast<void*>(st.q_start),
                  static_cast<void*>(st.kv_len), static_cast<void*>(st.tables)}) {
    BENCH_CHECK(cudaFree(p));
  }
}

// Runs ours (NaN-poisoned output first) and, when `general`, the general kernel into ref; returns
// ||ours - general|| / ||general|| (or -1 without general) and our output on the host.
double RunChecked(Setup& st, bool general, std::vector<uint16_t>* ours, float* general_ms) {
  const size_t elems = st.q_host.size();
  BENCH_CHECK(cudaMemset(st.out, 0xff, elems * 2));
  BENCH_CHECK(g_launch(st.args, nullptr));
  BENCH_CHECK(cudaDeviceSynchronize());
  ours->resize(elems);
  BENCH_CHECK(cudaMemcpy(ours->data(), st.out, elems * 2, cudaMemcpyDeviceToHost));
  if (!general) return -1;
  AttentionArgs ref = st.args;
  ref.out = static_cast<bf16*>(st.ref);
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  BENCH_CHECK(cudaEventRecord(e0));
  BENCH_CHECK(LaunchAttention(ref, nullptr));
  BENCH_CHECK(cudaEventRecord(e1));
  BENCH_CHECK(cudaEventSynchronize(e1));
  BENCH_CHECK(cudaEventElapsedTime(general_ms, e0, e1));
  std::vector<uint16_t> b(elems);
  BENCH_CHECK(cudaMemcpy(b.data(), st.ref, elems * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < elems; ++i) {
    const double x = FromBf16((*ours)[i]), y = FromBf16(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

// Median milliseconds per call over 7 repetitions of a batch of calls (~25 ms each).
float TimeMs(const AttentionArgs& args) {
  return MedianMsPerCall([&](int) { BENCH_CHECK(g_launch(args, nullptr)); }, 25.0f, 3, 1000, 7);
}

void Dump(const std::string& dir, const Shape& sh, const Setup& st,
          const std::vector<uint16_t>& ours) {
  const std::string base = dir + "/" + sh.model.name + "_" + sh.label + "_";
  WriteFile(base + "q.bin", st.q_host.data(), st.q_host.size() * 2);
  WriteFile(base + "k.bin", st.k_dense.data(), st.k_dense.size() * 2);
  WriteFile(base + "v.bin", st.v_dense.data(), st.v_dense.size() * 2);
  WriteFile(base + "out.bin", ours.data(), ours.size() * 2);
}

void Run(const Shape& sh, const char* dump_dir, uint64_t seed) {
  Setup st = Prepare(sh, seed);
  const bool check = st.pairs <= kMaxCheckPairs;
  std::vector<uint16_t> ours;
  float general_ms = 0;
  const double err = RunChecked(st, check, &ours, &general_ms);
  if (dump_dir != nullptr && sh.label == "2048") Dump(dump_dir, sh, st, ours);
  const float ms = TimeMs(st.args);
  const double tflops = 4.0 * kHeadDim * sh.model.q_heads * st.pairs / (ms * 1e-3) / 1e12;
  std::printf(
      "%-14s %-16s rows %6lld  %9.1f us  %6.1f TFLOP/s  err vs general %s  "
      "general %.1f us\n",
      sh.model.name, sh.label.c_str(), static_cast<long long>(st.rows), ms * 1e3, tflops,
      check ? std::to_string(err).c_str() : "-", general_ms * 1e3);
  std::printf("CSV,ours,%s,%s,%.2f,%.2f,%.3e,%.2f,%s\n", sh.model.name, sh.label.c_str(), ms * 1e3,
              tflops, check ? err : -1.0, general_ms * 1e3, g_kernel);
  std::fflush(stdout);
  Release(st);
}

std::vector<Shape> Shapes(bool quick) {
  const Model models[] = {{"llama3.1-8b", 32, 8}, {"qwen3-30b-a3b", 32, 4}};
  std::vector<int> tokens =
      quick ? std::vector<int>{1024, 8192} : std::vector<int>{1024, 2048, 4096, 8192, 16384};
  std::vector<Shape> out;
  for (const Model& m : models) {
    for (int n : tokens) out.push_back({m, std::to_string(n), {{n, n}}});
    out.push_back({m, "chunk4k+prefix12k", {{4096, 16384}}});
    out.push_back({m,
                   "batch8-prefixes",
                   {{512, 512},
                    {1000, 3000},
                    {1536, 1536},
                    {77, 2125},
                    {2048, 2048},
                    {300, 4000},
                    {3500, 3500},
                    {1, 999}}});
  }
  return out;
}

int Main(int argc, char** argv) {
  bool quick = false;
  const char* dump_dir = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump_dir = argv[++i];
    if (std::strcmp(argv[i], "--kernel") == 0 && i + 1 < argc) g_kernel = argv[++i];
  }
  const bool wgmma = WgmmaAvailable();
  if (std::strcmp(g_kernel, "auto") == 0) {
    g_kernel = wgmma ? "wgmma" : "mma";
  } else if (std::strcmp(g_kernel, "wgmma") == 0 || std::strcmp(g_kernel, "wgmma-cp") == 0) {
    if (!wgmma) {
      std::fprintf(stderr, "--kernel %s needs a compute capability 9.0 device\n", g_kernel);
      return 2;
    }
    g_launch = std::strcmp(g_kernel, "wgmma") == 0 ? LaunchPrefillAttentionWgmma
                                                   : LaunchPrefillAttentionWgmmaCp;
  } else if (std::strcmp(g_kernel, "mma") == 0) {
    g_launch = LaunchPrefillAttentionMma;
  } else {
    std::fprintf(stderr, "--kernel: auto, wgmma, wgmma-cp or mma, not '%s'\n", g_kernel);
    return 2;
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, kernel %s\n", prop.name, prop.multiProcessorCount, g_kernel);
  uint64_t seed = 1;
  for (const Shape& sh : Shapes(quick)) Run(sh, dump_dir, seed++);
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::Main(argc, argv); }
