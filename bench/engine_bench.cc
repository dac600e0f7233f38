// CPU engine benchmarks: decode step and prefill on built-in presets, reported as tokens/s and
// as a fraction of this machine's memory roofline (weight + KV bytes per step over the read
// bandwidth measured in the same run). See docs/BENCHMARKS.md.
//
//   build/bin/engine_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <thread>
#include <vector>

#include "strata/engine/model_runner.h"
#include "strata/engine/presets.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

constexpr int kBlockSize = 16;

// A read-only stream the compiler vectorizes with the widest instructions this CPU has, so the
// loop is bound by memory, not by adds.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t SumWords(const uint64_t* p,
                                                                               size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i < n; ++i) acc += p[i];
  return acc;
}

// Read bandwidth of this machine: the best of a 2-thread vectorized sum and a 2-thread memcpy
// (counting the bytes read) over 1 GiB, larger than any cache, over several repetitions.
// The roofline's denominator.
double ReadRate(const std::vector<uint64_t>& src, std::vector<uint64_t>& dst, bool copy) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t n = src.size();
  std::atomic<uint64_t> sink{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
      if (copy) {
        std::memcpy(dst.data() + lo, src.data() + lo, (hi - lo) * sizeof(uint64_t));
        return;
      }
      sink += SumWords(src.data() + lo, hi - lo);
    });
  }
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return n * sizeof(uint64_t) / s;
}

double MeasureReadBandwidth() {
  static double cached = [] {
    std::vector<uint64_t> src(size_t{1} << 27, 1), dst(size_t{1} << 27, 0);
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      best = std::max({best, ReadRate(src, dst, false), ReadRate(src, dst, true)});
    }
    return best;
  }();
  return cached;
}

ModelRunner& Runner(const std::string& preset, int blocks) {
  static std::map<std::string, std::unique_ptr<ModelRunner>> runners;
  auto& slot = runners[preset];
  if (!slot) {
    auto dir = ResolveModelPath("preset:" + preset);
    auto plugin = LoadPlugin("cpu");
    if (!dir.ok() || !plugin.ok()) std::abort();
    RunnerOptions opts;
    opts.block_size = kBlockSize;
    opts.num_kv_blocks = blocks;
    auto runner = ModelRunner::Create(*plugin, *dir, opts);
    if (!runner.ok()) {
      std::fprintf(stderr, "%s\n", runner.status().ToString().c_str());
      std::abort();
    }
    slot = std::move(*runner);
  }
  return *slot;
}

void BM_ReadBandwidth(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(MeasureReadBandwidth());
  state.counters["GB/s"] = MeasureReadBandwidth() / 1e9;
}

// One decode step of `batch` sequences with `ctx` tokens of context each.
void Decode(benchmark::State& state, const std::string& preset) {
  const int batch = static_cast<int>(state.range(0)), ctx = static_cast<int>(state.range(1));
  const int per_seq = ctx / kBlockSize + 1;
  ModelRunner& runner = Runner(preset, 8192);
  if (batch * per_seq > runner.num_kv_blocks()) {
    state.SkipWithError("KV cache too small");
    return;
  }
  std::vector<std::vector<BlockId>> tables(batch);
  std::vector<int32_t> prompt(ctx, 1), next(1, 2);
  for (int s = 0; s < batch; ++s) {
    tables[s].resize(per_seq);
    std::iota(tables[s].begin(), tables[s].end(), s * per_seq);
    ForwardSeq fill{prompt, 0, tables[s], ForwardSeq::Logits::kNone};
    if (!runner.Forward(std::span(&fill, 1)).ok()) std::abort();
  }
  std::vector<ForwardSeq> step(batch);
  for (int s = 0; s < batch; ++s) step[s] = {next, ctx, tables[s], ForwardSeq::Logits::kLast};
  for (auto _ : state) {
    auto out = runner.Forward(step);
    benchmark::DoNotOptimize(out);
  }
  const auto& c = runner.config();
  const double kv_bytes =
      double(batch) * (ctx + 1) * c.num_layers * 2 * c.num_kv_heads * c.head_dim * sizeof(float);
  // Bytes a step must read: every weight but the embedding table (only `batch` rows of it are
  // touched, unless it doubles as the LM head), plus the KV of every sequence.
  const double embed = c.tie_word_embeddings ? 0.0 : double(c.vocab_size) * c.hidden_size * 4;
  const double bytes = double(runner.weight_bytes()) - embed + kv_bytes;
  state.counters["MB/step"] = bytes / 1e6;
  state.counters["tok/s"] =
      benchmark::Counter(double(batch) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["roofline_ms"] = bytes / MeasureReadBandwidth() * 1e3;
  // roofline time / measured time (rate of roofline-seconds per second).
  state.counters["frac_roofline"] = benchmark::Counter(
      bytes / MeasureReadBandwidth() * state.iterations(), benchmark::Counter::kIsRate);
}

void Prefill(benchmark::State& state, const std::string& preset) {
  const int n = static_cast<int>(state.range(0));
  ModelRunner& runner = Runner(preset, 8192);
  std::vector<BlockId> table(n / kBlockSize + 1);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> prompt(n);
  for (int i = 0; i < n; ++i) prompt[i] = (i * 7919) % 1000 + 1;
  ForwardSeq seq{prompt, 0, table, ForwardSeq::Logits::kLast};
  for (auto _ : state) {
    auto out = runner.Forward(std::span(&seq, 1));
    benchmark::DoNotOptimize(out);
  }
  state.counters["tok/s"] =
      benchmark::Counter(double(n) * state.iterations(), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReadBandwidth)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(Decode, tiny_llama, "tiny-llama")
    ->ArgsProduct({{1, 8, 32}, {128, 1024}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Decode, llama_100m, "llama-100m")
    ->ArgsProduct({{1, 8}, {128, 1024}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Prefill, tiny_llama, "tiny-llama")
    ->Arg(128)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(Prefill, llama_100m, "llama-100m")
    ->Arg(128)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
