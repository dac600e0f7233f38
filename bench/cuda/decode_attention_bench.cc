// Decode attention on one GPU: the CUDA plugin's split-KV kernel (PlanDecodeAttention +
// LaunchDecodeAttention, the same launcher the plugin's attention_decode calls), timed with
// CUDA events over Llama-3.1-8B (32 q / 8 kv heads) and Qwen3-30B-A3B (32 / 4) head shapes,
// head_dim 128, bf16, block_size 16, batch {1, 8, 32, 64, 256} x context {512, 2k, 8k, 32k}.
//
// Achieved GB/s = K+V bytes the step must read (batch x context x kv_heads x 128 x 2 x 2 B)
// over the median time per call. The same run measures the device-copy bandwidth (cudaMemcpy
// D2D of 2 GiB, counting bytes read + written). Each shape is also checked once against the
// plugin's general attention kernel (normalized L2 error printed).
//
// One pool (one layer: a block holds K then V of 16 tokens) is allocated and filled with random
// bf16 once, sized for the largest shape; every shape views it with its own head count and
// scatters its sequences' blocks by a random permutation. Shapes whose K/V read is under
// 256 MiB rotate over several disjoint block sets so the timing is not served from the L2. Output: a readable line per shape and "CSV," lines that
// scripts/bench_cuda.sh joins with torch_sdpa_decode.py's.
//
//   decode_attention_bench [--quick] [--more-waves] [--batches 1,8] [--contexts 2048]
//                          [--warps 4|8] [--plan-kv N]
//     --quick: batch {1, 32} x context {2k, 32k}; --batches / --contexts: these instead
//     --more-waves: also time each shape with splits raised to >= 4 waves of CTAs ("CSV,alt")
//     --warps: plan every shape with CTAs of this many warps (default: the plan's own choice)
//     --plan-kv N: plan for max(N, context) keys with block tables that long, as graph replay
//       plans a decode step for its context bucket (e.g. 4096 for a 2,049-token step)
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
using strata::cuda::bench::FromBf16;
using strata::cuda::bench::ToBf16;


constexpr int kHeadDim = 128;
constexpr int kBlockSize = 16;
constexpr int kLayers = 1;
constexpr int kLayer = 0;
constexpr double kRotateBytes = 256.0 * (1 << 20);
int sm_count_ = 132;
bool try_more_waves_ = false;
int plan_kv_ = 0;

struct Model {
  const char* name;
  int q_heads;
  int kv_heads;
};

// Fills `bytes` of device memory with a repeating 64 MiB pattern of random bf16 in [-1, 1].
void FillRandom(void* dst, size_t bytes, std::mt19937& rng) {
  const size_t pattern = std::min<size_t>(bytes, size_t{64} << 20) / 2 * 2;
  std::vector<uint16_t> host(pattern / 2);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& h : host) h = ToBf16(u(rng));
  BENCH_CHECK(cudaMemcpy(dst, host.data(), pattern, cudaMemcpyHostToDevice));
  for (size_t done = pattern; done < bytes; done *= 2) {
    BENCH_CHECK(cudaMemcpy(static_cast<char*>(dst) + done, dst, std::min(done, bytes - done),
                           cudaMemcpyDeviceToDevice));
  }
}

struct Shape {
  Model model;
  int batch;
  int ctx;
};

struct Result {
  double us = 0, gbs = 0, rel_err = 0, alt_us = 0;
  int splits = 0, alt_splits = 0, warps = 0;
};

int Rotations(const Shape& sh) {
  const double read_bytes = double{1} * sh.batch * sh.ctx * sh.model.kv_heads * kHeadDim * 4;
  return std::clamp(static_cast<int>(std::ceil(kRotateBytes / read_bytes)), 1, 64);
}

size_t PoolBytes(const Shape& sh) {
  const size_t blocks_per_seq = (sh.ctx + kBlockSize - 1) / kBlockSize;
  return size_t{1} * Rotations(sh) * sh.batch * blocks_per_seq * kLayers * 2 * kBlockSize *
         sh.model.kv_heads * kHeadDim * 2;
}

// Device buffers of one shape over the shared pool: `rotations` block tables, q, out, ref and
// the plan's workspace.
struct Setup {
  std::vector<int32_t*> tables;
  int32_t *q_start = nullptr, *kv_len = nullptr;
  void *q = nullptr, *out = nullptr, *ref = nullptr, *workspace = nullptr;
  AttentionArgs args;
  DecodePlan plan;
};

Setup Prepare(const Shape& sh, void* pool, std::mt19937& rng) {
  Setup st;
  const int blocks_per_seq = (sh.ctx + kBlockSize - 1) / kBlockSize;
  const int plan_kv = std::max(plan_kv_, sh.ctx);
  const int table_row = (plan_kv + kBlockSize - 1) / kBlockSize;  // entries past ctx: block 0
  const int rotations = Rotations(sh);
  const int64_t num_blocks = int64_t{rotations} * sh.batch * blocks_per_seq;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const size_t table_len = size_t{1} * sh.batch * table_row;
  for (int r = 0; r < rotations; ++r) {
    std::vector<int32_t> rows(table_len, 0);
    for (int b = 0; b < sh.batch; ++b) {
      std::copy_n(perm.begin() + (int64_t{r} * sh.batch + b) * blocks_per_seq, blocks_per_seq,
                  rows.begin() + int64_t{b} * table_row);
    }
    int32_t* t = nullptr;
    BENCH_CHECK(cudaMalloc(&t, table_len * 4));
    BENCH_CHECK(cudaMemcpy(t, rows.data(), table_len * 4, cudaMemcpyHostToDevice));
    st.tables.push_back(t);
  }
  std::vector<int32_t> q_start(sh.batch + 1), kv_len(sh.batch, sh.ctx);
  std::iota(q_start.begin(), q_start.end(), 0);
  BENCH_CHECK(cudaMalloc(&st.q_start, q_start.size() * 4));
  BENCH_CHECK(cudaMalloc(&st.kv_len, kv_len.size() * 4));
  BENCH_CHECK(cudaMemcpy(st.q_start, q_start.data(), q_start.size() * 4, cudaMemcpyHostToDevice));
  BENCH_CHECK(cudaMemcpy(st.kv_len, kv_len.data(), kv_len.size() * 4, cudaMemcpyHostToDevice));
  const size_t q_bytes = size_t{2} * sh.batch * sh.model.q_heads * kHeadDim;
  BENCH_CHECK(cudaMalloc(&st.q, q_bytes));
  BENCH_CHECK(cudaMalloc(&st.out, q_bytes));
  BENCH_CHECK(cudaMalloc(&st.ref, q_bytes));
  FillRandom(st.q, q_bytes, rng);
  AttentionArgs& a = st.args;
  a.q = static_cast<const bf16*>(st.q);
  a.q_stride = int64_t{sh.model.q_heads} * kHeadDim;
  a.out = static_cast<bf16*>(st.out);
  a.out_stride = a.q_stride;
  a.rows = sh.batch;
  a.q_heads = sh.model.q_heads;
  a.cache = static_cast<const bf16*>(pool);
  a.dims = CacheDims{num_blocks, kLayers, kBlockSize, sh.model.kv_heads, kHeadDim};
  a.layer = kLayer;
  a.q_start = st.q_start;
  a.kv_len = st.kv_len;
  a.block_tables = st.tables[0];
  a.early_batch = true;  // as the plugin sets it in a decode step: nothing here writes them
  a.num_seqs = sh.batch;
  a.max_blocks_per_seq = table_row;
  a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  BENCH_CHECK(PlanDecodeAttention(a, plan_kv, &st.plan));
  if (st.plan.workspace_bytes > 0) BENCH_CHECK(cudaMalloc(&st.workspace, st.plan.workspace_bytes));
  return st;
}

void Release(Setup& st) {
  for (int32_t* t : st.tables) BENCH_CHECK(cudaFree(t));
  for (void* p : {static_cast<void*>(st.q_start), static_cast<void*>(st.kv_len), st.q,
                  st.out, st.ref, st.workspace}) {
    if (p != nullptr) BENCH_CHECK(cudaFree(p));
  }
}

// ||fast - general|| / ||general|| over the whole output of rotation 0.
double CheckAgainstGeneral(Setup& st, size_t elems) {
  AttentionArgs ref = st.args;
  ref.out = static_cast<bf16*>(st.ref);
  BENCH_CHECK(cudaMemset(st.out, 0xff, elems * 2));  // NaN poison: unwritten outputs show
  BENCH_CHECK(LaunchAttention(ref, nullptr));
  BENCH_CHECK(LaunchDecodeAttention(st.args, st.plan, st.workspace, nullptr));
  BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> a(elems), b(elems);
  BENCH_CHECK(cudaMemcpy(a.data(), st.out, elems * 2, cudaMemcpyDeviceToHost));
  BENCH_CHECK(cudaMemcpy(b.data(), st.ref, elems * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (size_t i = 0; i < elems; ++i) {
    const double x = FromBf16(a[i]), y = FromBf16(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

Result Run(const Shape& sh, void* pool, std::mt19937& rng) {
  Setup st = Prepare(sh, pool, rng);
  Result r;
  r.splits = st.plan.splits;
  r.warps = st.plan.warps;
  r.rel_err = CheckAgainstGeneral(st, size_t{1} * sh.batch * sh.model.q_heads * kHeadDim);
  cudaEvent_t e0, e1;
  BENCH_CHECK(cudaEventCreate(&e0));
  BENCH_CHECK(cudaEventCreate(&e1));
  int call = 0;
  auto launch = [&] {
    st.args.block_tables = st.tables[call++ % st.tables.size()];
    BENCH_CHECK(LaunchDecodeAttention(st.args, st.plan, st.workspace, nullptr));
  };
  auto time_calls = [&](int n) {
    BENCH_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < n; ++i) launch();
    BENCH_CHECK(cudaEventRecord(e1));
    BENCH_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / n;
  };
  time_calls(3);  // warm-up
  const float one = time_calls(1);
  const int iters = std::clamp(static_cast<int>(5.0f / std::max(one, 1e-3f)), 5, 2000);
  auto median_us = [&] {
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) ms.push_back(time_calls(iters));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3;
  };
  r.us = median_us();
  const double bytes = double{1} * sh.batch * sh.ctx * sh.model.kv_heads * kHeadDim * 4;
  r.gbs = bytes / (r.us * 1e-6) / 1e9;
  // Experiment: the same kernel with splits raised until the grid is >= 4 waves (at >= 256
  // keys per split), to see whether one-wave grids lose to their slowest CTA.
  const DecodePlan plan = st.plan;
  const int64_t items = int64_t{sh.batch} * sh.model.kv_heads, slots = 2 * sm_count_;
  int64_t splits = std::max<int64_t>(plan.splits, (4 * slots + items - 1) / items);
  splits = std::min<int64_t>(splits, std::max(1, sh.ctx / 256));
  if (try_more_waves_ && splits > plan.splits) {
    int64_t chunk = ((sh.ctx + splits - 1) / splits + 15) / 16 * 16;
    st.plan.splits = static_cast<int32_t>((sh.ctx + chunk - 1) / chunk);
    st.plan.chunk = static_cast<int32_t>(chunk);
    void* saved = st.workspace;
    BENCH_CHECK(cudaMalloc(&st.workspace, size_t{1} * sh.batch * sh.model.q_heads *
                                              st.plan.splits * (kHeadDim + 1) * 4));
    time_calls(3);
    r.alt_us = median_us();
    r.alt_splits = st.plan.splits;
    BENCH_CHECK(cudaFree(st.workspace));
    st.workspace = saved;
    st.plan = plan;
  }
  BENCH_CHECK(cudaEventDestroy(e0));
  BENCH_CHECK(cudaEventDestroy(e1));
  Release(st);
  return r;
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::vector<int> only_batches, only_contexts;
  auto ints = [](const char* list) {
    std::vector<int> v;
    for (const char* p = list; *p != '\0';) {
      char* end = nullptr;
      const long x = std::strtol(p, &end, 10);
      if (end == p || x <= 0) {
        std::fprintf(stderr, "decode_attention_bench: bad list '%s'\n", list);
        std::exit(2);
      }
      v.push_back(static_cast<int>(x));
      p = *end == ',' ? end + 1 : end;
    }
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--more-waves") {
      try_more_waves_ = true;
    } else if (arg == "--batches" && has_value) {
      only_batches = ints(argv[++i]);
    } else if (arg == "--contexts" && has_value) {
      only_contexts = ints(argv[++i]);
    } else if (arg == "--warps" && has_value) {
      SetDecodeAttentionWarps(std::atoi(argv[++i]));
    } else if (arg == "--plan-kv" && has_value) {
      plan_kv_ = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: decode_attention_bench [--quick] [--more-waves] [--batches 1,8] "
                   "[--contexts 2048] [--warps 4|8] [--plan-kv N]\n");
      return 2;
    }
  }
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  sm_count_ = prop.multiProcessorCount;
  std::printf("# %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  const double copy = CopyBandwidthGBs();
  std::printf("# device copy (D2D 2 GiB, read+write): %.0f GB/s\nCSV,copy,%.1f\n", copy, copy);
  const Model models[] = {{"llama3.1-8b", 32, 8}, {"qwen3-30b-a3b", 32, 4}};
  std::vector<int> batches = {1, 8, 32, 64, 256}, contexts = {512, 2048, 8192, 32768};
  if (quick) {
    batches = {1, 32};
    contexts = {2048, 32768};
  }
  if (!only_batches.empty()) batches = only_batches;
  if (!only_contexts.empty()) contexts = only_contexts;
  std::mt19937 rng(1234);
  size_t pool_bytes = 0;
  for (const Model& m : models) {
    for (int b : batches) {
      for (int ctx : contexts) pool_bytes = std::max(pool_bytes, PoolBytes({m, b, ctx}));
    }
  }
  void* pool = nullptr;
  BENCH_CHECK(cudaMalloc(&pool, pool_bytes));
  FillRandom(pool, pool_bytes, rng);
  for (const Model& m : models) {
    for (int b : batches) {
      for (int ctx : contexts) {
        const Result r = Run({m, b, ctx}, pool, rng);
        std::printf(
            "%-14s batch %3d ctx %5d: %9.1f us %7.0f GB/s (%.2f of copy) splits %3d warps %d "
            "err %.1e\n",
            m.name, b, ctx, r.us, r.gbs, r.gbs / copy, r.splits, r.warps, r.rel_err);
        std::printf("CSV,ours,%s,%d,%d,%.2f,%.1f,%d,%.3e\n", m.name, b, ctx, r.us, r.gbs,
                    r.splits, r.rel_err);
        if (r.alt_splits > 0) {
          std::printf("CSV,alt,%s,%d,%d,%.2f,%d\n", m.name, b, ctx, r.alt_us, r.alt_splits);
        }
        std::fflush(stdout);
      }
    }
  }
  BENCH_CHECK(cudaFree(pool));
  return 0;
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) { return strata::cuda::Main(argc, argv); }
