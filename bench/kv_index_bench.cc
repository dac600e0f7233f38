// strata::router::KvIndex: event ingest rate and MatchPrefix latency at cluster scale.
//
//   BM_ApplyMixed        one Apply per stored/removed event, single thread, steady-state index of
//                        ~256k blocks across 100 workers (items_per_second = events/s).
//   BM_ApplyBatchMixed   the same stream, 64 events per ApplyBatch (one lock per batch).
//   BM_MatchPrefix/0     100 workers, ~1M indexed blocks, 64-block queries: an 8-block system
//                        prompt every worker holds, then a document chain 1-8 workers hold.
//   BM_MatchPrefix/1     worst case: all 100 workers hold all 64 blocks of the query.
// MatchPrefix reports per-query p50_us / p99_us from a manual timing loop.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "strata/router/kv_index.h"

namespace strata::router {
namespace {

constexpr int kWorkers = 100;

std::vector<BlockHash> RandomHashes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<BlockHash> hashes(n);
  for (BlockHash& h : hashes) h = rng() | 1;  // never kRootBlockHash
  return hashes;
}

void RegisterWorkers(KvIndex& index) {
  for (WorkerId w = 0; w < kWorkers; ++w) {
    if (!index.RegisterWorker(w).ok()) std::abort();
  }
}

// Event i stores hash i (worker i % kWorkers); once the window is full it also removes the block
// stored kWindow events earlier, so the index stays at kWindow blocks: 2 events per step.
constexpr size_t kHashes = size_t{1} << 20;
constexpr size_t kWindow = size_t{1} << 18;

void BM_ApplyMixed(benchmark::State& state) {
  const std::vector<BlockHash> hashes = RandomHashes(kHashes, 1);
  KvIndex index;
  RegisterWorkers(index);
  size_t i = 0;
  for (; i < kWindow; ++i) {
    (void)index.Apply(i % kWorkers, Tier::kGpu, {KvEvent::Kind::kStored, hashes[i], 0});
  }
  for (auto _ : state) {
    const size_t old = i - kWindow;
    const KvEvent stored{KvEvent::Kind::kStored, hashes[i % kHashes], hashes[(i - 1) % kHashes]};
    absl::Status s1 = index.Apply(i % kWorkers, Tier::kGpu, stored);
    absl::Status s2 = index.Apply(old % kWorkers, Tier::kGpu,
                                  {KvEvent::Kind::kRemoved, hashes[old % kHashes], 0});
    benchmark::DoNotOptimize(s1.ok() && s2.ok());
    ++i;
  }
  state.SetItemsProcessed(2 * static_cast<int64_t>(state.iterations()));
  state.counters["blocks"] = static_cast<double>(index.num_blocks());
}
BENCHMARK(BM_ApplyMixed);

void BM_ApplyBatchMixed(benchmark::State& state) {
  constexpr int kBatch = 64;
  const std::vector<BlockHash> hashes = RandomHashes(kHashes, 2);
  KvIndex index;
  RegisterWorkers(index);
  // Worker w owns every hash whose index is w mod kWorkers; batches are per worker.
  std::vector<KvEvent> batch(kBatch);
  size_t base = 0;
  auto fill = [&](KvEvent::Kind kind, size_t start) {
    for (int j = 0; j < kBatch; ++j) batch[j] = {kind, hashes[(start + j) % kHashes], 0};
  };
  for (; base < kWindow; base += kBatch) {
    fill(KvEvent::Kind::kStored, base);
    (void)index.ApplyBatch((base / kBatch) % kWorkers, Tier::kGpu, batch);
  }
  for (auto _ : state) {
    fill(KvEvent::Kind::kStored, base);
    absl::Status s1 = index.ApplyBatch((base / kBatch) % kWorkers, Tier::kGpu, batch);
    const size_t old = base - kWindow;
    fill(KvEvent::Kind::kRemoved, old);
    absl::Status s2 = index.ApplyBatch((old / kBatch) % kWorkers, Tier::kGpu, batch);
    benchmark::DoNotOptimize(s1.ok() && s2.ok());
    base += kBatch;
  }
  state.SetItemsProcessed(2 * kBatch * static_cast<int64_t>(state.iterations()));
  state.counters["blocks"] = static_cast<double>(index.num_blocks());
}
BENCHMARK(BM_ApplyBatchMixed);

// ---- MatchPrefix at 100 workers x ~1M blocks --------------------------------------------------

constexpr int kSystemBlocks = 8;
constexpr int kDocBlocks = 56;  // query = 8 + 56 = 64 blocks
constexpr int kDocs = 1'000'000 / kDocBlocks + 1;
constexpr int kHotDocs = 16;  // held in full by every worker

struct MatchFixture {
  KvIndex index;
  std::vector<std::vector<BlockHash>> queries;  // [0, kDocs) normal, then kHotDocs hot
};

void StoreChain(KvIndex& index, WorkerId w, Tier tier, const std::vector<BlockHash>& chain, int n) {
  for (int b = 0; b < n; ++b) {
    BlockHash parent = b == 0 ? kRootBlockHash : chain[b - 1];
    (void)index.Apply(w, tier, {KvEvent::Kind::kStored, chain[b], parent});
  }
}

MatchFixture* BuildMatchFixture() {
  auto* f = new MatchFixture();
  RegisterWorkers(f->index);
  std::mt19937_64 rng(3);
  const std::vector<BlockHash> system = RandomHashes(kSystemBlocks, 4);
  for (WorkerId w = 0; w < kWorkers; ++w) StoreChain(f->index, w, Tier::kGpu, system, 8);
  for (int d = 0; d < kDocs + kHotDocs; ++d) {
    std::vector<BlockHash> chain = system;
    for (int b = 0; b < kDocBlocks; ++b) chain.push_back(rng() | 1);
    if (d >= kDocs) {
      for (WorkerId w = 0; w < kWorkers; ++w) StoreChain(f->index, w, Tier::kGpu, chain, 64);
    } else {
      // The first holder has the whole document (so every block is indexed); 0-7 more hold a
      // random prefix, in GPU or host memory.
      StoreChain(f->index, rng() % kWorkers, Tier::kGpu, chain, 64);
      for (int k = rng() % 8; k > 0; --k) {
        Tier tier = rng() % 4 == 0 ? Tier::kHostPinned : Tier::kGpu;
        StoreChain(f->index, rng() % kWorkers, tier, chain, 1 + rng() % 64);
      }
    }
    f->queries.push_back(std::move(chain));
  }
  return f;
}

void BM_MatchPrefix(benchmark::State& state) {
  static MatchFixture* fixture = BuildMatchFixture();
  const bool hot = state.range(0) == 1;
  std::mt19937_64 rng(5);
  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 20);
  int64_t matched = 0;
  for (auto _ : state) {
    const size_t q = hot ? kDocs + rng() % kHotDocs : rng() % kDocs;
    const auto start = std::chrono::steady_clock::now();
    std::vector<WorkerMatch> result = fixture->index.MatchPrefix(fixture->queries[q]);
    const auto stop = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(result.data());
    matched += static_cast<int64_t>(result.size());
    latencies_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  std::sort(latencies_us.begin(), latencies_us.end());
  auto pct = [&](double p) {
    return latencies_us[static_cast<size_t>(p * static_cast<double>(latencies_us.size() - 1))];
  };
  state.counters["p50_us"] = pct(0.50);
  state.counters["p99_us"] = pct(0.99);
  state.counters["max_us"] = latencies_us.back();
  state.counters["workers_matched"] = static_cast<double>(matched) / state.iterations();
  state.counters["blocks"] = static_cast<double>(fixture->index.num_blocks());
}
BENCHMARK(BM_MatchPrefix)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::router

BENCHMARK_MAIN();
