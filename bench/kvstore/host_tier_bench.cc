// G2 host tier Put/Get bandwidth against plain memcpy on the same buffers (the pool's own slots
// and one source/destination block), block sizes 64 KiB .. 4 MiB. Each Put stores a new block
// (evicting the oldest once the pool is full), so it pays for the copy, the checksum and the
// bookkeeping; each Get copies a resident block out and verifies its checksum.
// scripts/bench_kvstore_host.sh runs it and prints the ratios (goal: >= 80% of memcpy).
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "strata/kvstore/host_tier.h"

namespace strata::kvstore {
namespace {

// Pool size: well above the last-level cache, so every copy goes to DRAM like a real tier's.
constexpr int64_t kPoolBytes = int64_t{256} << 20;

struct Fixture {
  std::unique_ptr<HostTier> tier;
  std::vector<std::byte> block;  // Put source / Get destination / memcpy peer
  int64_t slots = 0;
  BlockHash next_key = 1;
};

// One tier per block size, shared by the memcpy, Put and Get runs of that size.
Fixture& GetFixture(size_t block_bytes) {
  static auto* fixtures = new std::map<size_t, Fixture>;
  Fixture& f = (*fixtures)[block_bytes];
  if (f.tier == nullptr) {
    HostTierOptions options;
    options.block_bytes = block_bytes;
    options.capacity_bytes = kPoolBytes;
    f.tier = std::move(HostTier::Create(options)).value();
    f.block.assign(block_bytes, std::byte{0x5a});
    f.slots = kPoolBytes / static_cast<int64_t>(block_bytes);
    // Fill the pool so Get has residents and Put evicts from the first iteration.
    for (int64_t i = 0; i < f.slots; ++i) {
      (void)f.tier->Put({.hash = f.next_key++}, f.block);
    }
  }
  return f;
}

void BM_Memcpy(benchmark::State& state) {
  const auto block_bytes = static_cast<size_t>(state.range(0));
  const bool into_pool = state.range(1) != 0;
  Fixture& f = GetFixture(block_bytes);
  auto* pool = static_cast<std::byte*>(f.tier->pool_base());
  int64_t slot = 0;
  for (auto _ : state) {
    std::byte* p = pool + slot * static_cast<int64_t>(block_bytes);
    if (into_pool) {
      std::memcpy(p, f.block.data(), block_bytes);
    } else {
      std::memcpy(f.block.data(), p, block_bytes);
    }
    benchmark::ClobberMemory();
    slot = (slot + 1) % f.slots;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(block_bytes));
  state.SetLabel(into_pool ? "memcpy into pool" : "memcpy out of pool");
}

void BM_HostPut(benchmark::State& state) {
  const auto block_bytes = static_cast<size_t>(state.range(0));
  Fixture& f = GetFixture(block_bytes);
  for (auto _ : state) {
    if (!f.tier->Put({.hash = f.next_key++}, f.block).ok()) state.SkipWithError("Put failed");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(block_bytes));
  state.SetLabel(f.tier->pinned() ? "pinned" : "unpinned");
}

void BM_HostGet(benchmark::State& state) {
  const auto block_bytes = static_cast<size_t>(state.range(0));
  Fixture& f = GetFixture(block_bytes);
  BlockHash key = f.next_key - f.slots;  // the oldest resident
  for (auto _ : state) {
    if (!f.tier->Get(key, f.block).ok()) state.SkipWithError("Get failed");
    key = key + 1 < f.next_key ? key + 1 : f.next_key - f.slots;
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(block_bytes));
}

void Sizes(benchmark::internal::Benchmark* b, bool with_direction) {
  for (int64_t size : {64 << 10, 256 << 10, 1 << 20, 4 << 20}) {
    if (with_direction) {
      b->Args({size, 1})->Args({size, 0});
    } else {
      b->Arg(size);
    }
  }
}

BENCHMARK(BM_Memcpy)->Apply([](auto* b) { Sizes(b, true); }) -> MinTime(0.3);
BENCHMARK(BM_HostPut)->Apply([](auto* b) { Sizes(b, false); }) -> MinTime(0.3);
BENCHMARK(BM_HostGet)->Apply([](auto* b) { Sizes(b, false); }) -> MinTime(0.3);

}  // namespace
}  // namespace strata::kvstore

BENCHMARK_MAIN();
