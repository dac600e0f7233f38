// The engine's write-through KV offload (Engine::SetBlockOffload, OffloadOn::kCommit) on a
// real plugin: the same prompts prefilled three ways in one run, wall time each, side by side:
//   none       no offload (the steps alone);
//   per-block  a 1-slot staging ring: every committed block is copied out and synchronized on
//              its own (what the engine did before the staging ring);
//   batched    the default ring (EngineOptions::kv_staging_bytes, 64 MiB): a step's blocks
//              are copied out without waiting and handed over at the next flush point.
//   G2 staged  the default ring, each block then put into a real G2 host tier
//              (TieredStore::Offload: a copy into the slot with the checksum computed on the way);
//   G2 direct  no ring: each block copied from the device straight into a reserved G2 slot
//              (Engine::SetBlockOffloadTarget; the pool registered with the backend where the
//              plugin can), its checksum computed from the slot at the flush.
// per-block and batched copy each block into a plain host buffer (what the G2 put does with it).
// Model: the llama-100m preset in bf16 (12 layers, 4 kv heads x 64: 192 KiB per 16-token
// block), distinct 1,000-token prompts, one token generated each, after one warm-up prompt;
// one after another, or with --together all submitted at once (a continuous batch: chunked
// prefill, each step commits blocks of several requests and the engine never goes idle).
//
//     kv_offload_bench [--plugin cpu|cuda|PATH] [--prompts N] [--together]
//     kv_offload_bench --plugin cuda --pool-startup 1,4,16
// The second form times what a worker pays at start-up for a G2 pool of each size (GiB): the
// host tier's mmap + MAP_POPULATE + mlock, then the backend's host_register (the offload target
// registers the pool), and host_unregister.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "strata/engine/engine.h"
#include "strata/engine/presets.h"
#include "strata/kvstore/host_tier.h"
#include "strata/kvstore/tiered_store.h"
#include "strata/plugin/plugin.h"

namespace strata {
namespace {

struct Options {
  std::string plugin = "cpu";
  int prompts = 16;
  bool together = false;
  std::vector<double> pool_gib;  // --pool-startup
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kv_offload_bench: %s\n", what.c_str());
  std::exit(1);
}

enum class Mode { kNone, kPerBlock, kBatched, kG2Staged, kG2Direct };
const char* Name(Mode m) {
  switch (m) {
    case Mode::kNone:
      return "none";
    case Mode::kPerBlock:
      return "per-block";
    case Mode::kBatched:
      return "batched";
    case Mode::kG2Staged:
      return "G2 staged";
    case Mode::kG2Direct:
      return "G2 direct";
  }
  return "?";
}

// A G2-only store big enough for every block the run offloads.
std::unique_ptr<kvstore::TieredStore> MakeStore(size_t block_bytes) {
  kvstore::HostTierOptions ho;
  ho.block_bytes = block_bytes;
  ho.capacity_bytes = int64_t{512} << 20;
  auto host = kvstore::HostTier::Create(ho);
  if (!host.ok()) Die(std::string(host.status().message()));
  kvstore::TieredStoreOptions so;
  so.offload = kvstore::OffloadMode::kWriteThrough;
  auto store = kvstore::TieredStore::Create(so, std::move(*host), nullptr, nullptr);
  if (!store.ok()) Die(std::string(store.status().message()));
  return std::move(*store);
}

struct Result {
  double seconds = 0;
  size_t blocks = 0;
  size_t bytes = 0;
};

std::vector<int32_t> Prompt(int i) {
  std::vector<int32_t> t(1000);
  for (size_t j = 0; j < t.size(); ++j) {
    t[j] = static_cast<int32_t>((int64_t{i + 2} * 7919 + int64_t(j) * 104729) % 30000 + 100);
  }
  return t;
}

void AddPrompt(Engine& e, const std::string& id, int i) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  p.ignore_eos = true;
  if (absl::Status s = e.AddRequest(id, Prompt(i), p); !s.ok()) Die(std::string(s.message()));
}

void RunToIdle(Engine& e) {
  while (e.HasUnfinished()) {
    auto out = e.Step();
    if (!out.ok()) Die(std::string(out.status().message()));
  }
}

Result Run(const std::string& dir, const Options& o, Mode mode, size_t block_bytes) {
  EngineOptions opts;
  opts.plugin = o.plugin;
  opts.runner.block_size = 16;
  opts.runner.num_kv_blocks = 4096;
  if (mode == Mode::kPerBlock) opts.kv_staging_bytes = block_bytes;
  auto engine = Engine::Create(dir, opts);
  if (!engine.ok()) Die(std::string(engine.status().message()));
  Engine& e = **engine;
  Result r;
  std::vector<std::byte> sink(size_t{256} << 20);
  size_t at = 0;
  std::unique_ptr<kvstore::TieredStore> store;
  if (mode == Mode::kG2Staged || mode == Mode::kG2Direct) store = MakeStore(block_bytes);
  if (mode == Mode::kG2Staged) {
    e.SetBlockOffload(Engine::OffloadOn::kCommit,
                      [&](BlockHash h, BlockHash parent, std::span<const std::byte> data) {
                        if (!store->Offload({.hash = h, .parent = parent}, data).ok()) return;
                        ++r.blocks;
                        r.bytes += data.size();
                      });
  } else if (mode == Mode::kG2Direct) {
    Engine::BlockOffloadTarget target;
    target.reserve = [&](BlockHash h,
                         BlockHash parent) -> absl::StatusOr<Engine::BlockOffloadSlot> {
      auto slot = store->ReserveOffload({.hash = h, .parent = parent});
      if (!slot.ok()) return slot.status();
      return Engine::BlockOffloadSlot{.id = slot->id, .bytes = slot->bytes};
    };
    target.finish = [&](uint64_t id, bool copied) {
      if (!copied) return store->AbortOffload(id);
      if (!store->CommitOffload(id).ok()) return;
      ++r.blocks;
      r.bytes += block_bytes;
    };
    if (absl::Status s = e.SetBlockOffloadTarget(Engine::OffloadOn::kCommit, std::move(target),
                                                 store->host_pool());
        !s.ok()) {
      Die(std::string(s.message()));
    }
  } else if (mode != Mode::kNone) {
    e.SetBlockOffload(Engine::OffloadOn::kCommit,
                      [&](BlockHash, BlockHash, std::span<const std::byte> data) {
                        if (at + data.size() > sink.size()) at = 0;
                        std::memcpy(sink.data() + at, data.data(), data.size());
                        at += data.size();
                        ++r.blocks;
                        r.bytes += data.size();
                      });
  }
  AddPrompt(e, "warm-up", -1);
  RunToIdle(e);
  r = Result{};
  const auto t0 = std::chrono::steady_clock::now();
  if (o.together) {
    for (int i = 0; i < o.prompts; ++i) AddPrompt(e, "p" + std::to_string(i), i);
    RunToIdle(e);
    std::fprintf(stderr, "%-9s %d prompts together", Name(mode), o.prompts);
  } else {
    for (int i = 0; i < o.prompts; ++i) {
      AddPrompt(e, "p" + std::to_string(i), i);
      RunToIdle(e);
      std::fprintf(stderr, "\r%-9s prompt %d/%d", Name(mode), i + 1, o.prompts);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  return r;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --pool-startup: a G2 pool of each size created (mmap, populate, mlock) and registered with
// the backend (where the plugin can), each phase timed.
void PoolStartup(const Options& o) {
  auto plugin = LoadPlugin(o.plugin);
  if (!plugin.ok()) Die(std::string(plugin.status().message()));
  auto backend = Backend::Create(*plugin);
  if (!backend.ok()) Die(std::string(backend.status().message()));
  const bool can_register = (*plugin)->has_host_register();
  std::printf(
      "| G2 pool GiB | create (mmap + populate + mlock) s | GB/s created | pinned | "
      "host_register s | GB/s registered | host_unregister s |\n"
      "|---:|---:|---:|---|---:|---:|---:|\n");
  for (const double gib : o.pool_gib) {
    kvstore::HostTierOptions t;
    t.block_bytes = size_t{1} << 20;
    t.capacity_bytes = static_cast<int64_t>(gib * (1 << 30));
    std::fprintf(stderr, "pool %.1f GiB: creating\n", gib);
    auto t0 = std::chrono::steady_clock::now();
    auto tier = kvstore::HostTier::Create(t);
    if (!tier.ok()) Die(std::string(tier.status().message()));
    const double create_s = SecondsSince(t0);
    const double gb = (*tier)->pool_bytes() / 1e9;
    double register_s = 0, unregister_s = 0;
    if (can_register) {
      std::fprintf(stderr, "pool %.1f GiB: registering\n", gib);
      t0 = std::chrono::steady_clock::now();
      if (absl::Status s = (*backend)->RegisterHost((*tier)->pool_base(), (*tier)->pool_bytes());
          !s.ok()) {
        Die(std::string(s.message()));
      }
      register_s = SecondsSince(t0);
      t0 = std::chrono::steady_clock::now();
      (*backend)->UnregisterHost((*tier)->pool_base());
      unregister_s = SecondsSince(t0);
    }
    const std::string reg = can_register ? absl::StrFormat("%.3f | %.1f | %.3f", register_s,
                                                           gb / register_s, unregister_s)
                                         : std::string("- | - | -");
    std::printf("| %.1f | %.3f | %.1f | %s | %s |\n", gib, create_s, gb / create_s,
                (*tier)->pinned() ? "yes" : "no", reg.c_str());
    std::printf("CSV,pool_startup,%.1f,%.4f,%d,%.4f,%.4f\n", gib, create_s, (*tier)->pinned(),
                register_s, unregister_s);
    std::fflush(stdout);
  }
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plugin" && i + 1 < argc) {
      o.plugin = argv[++i];
    } else if (a == "--together") {
      o.together = true;
    } else if (a == "--prompts" && i + 1 < argc) {
      o.prompts = std::atoi(argv[++i]);
      if (o.prompts < 1) Die("--prompts wants a positive number");
    } else if (a == "--pool-startup" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t pos = 0; pos <= list.size();) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        const double gib = std::atof(list.substr(pos, comma - pos).c_str());
        if (!(gib > 0)) Die("--pool-startup wants sizes in GiB, e.g. 1,4,16");
        o.pool_gib.push_back(gib);
        pos = comma + 1;
      }
    } else {
      Die("usage: kv_offload_bench [--plugin cpu|cuda|PATH] [--prompts N] [--together] "
          "[--pool-startup GiB,...]");
    }
  }
  return o;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  const Options o = ParseArgs(argc, argv);
  if (!o.pool_gib.empty()) {
    PoolStartup(o);
    return 0;
  }
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/strata_kv_offload_bench_" + std::to_string(::getpid());
  if (absl::Status s = WritePreset("llama-100m", dir, "bfloat16"); !s.ok()) {
    Die(std::string(s.message()));
  }
  auto plugin = LoadPlugin(o.plugin);
  if (!plugin.ok()) Die(std::string(plugin.status().message()));
  size_t block_bytes = 0;
  {
    EngineOptions probe;
    probe.plugin = o.plugin;
    probe.runner.block_size = 16;
    probe.runner.num_kv_blocks = 16;
    auto e = Engine::Create(dir, probe);
    if (!e.ok()) Die(std::string(e.status().message()));
    block_bytes = (*e)->kv_block_bytes();
  }
  std::printf(
      "# plugin %s (host_register: %s), llama-100m bf16, %zu-byte blocks, %d prompts x "
      "1000 tokens, %s\n",
      o.plugin.c_str(), (*plugin)->has_host_register() ? "yes" : "no", block_bytes, o.prompts,
      o.together ? "submitted together" : "one after another");
  const Result none = Run(dir, o, Mode::kNone, block_bytes);
  const Result per_block = Run(dir, o, Mode::kPerBlock, block_bytes);
  const Result batched = Run(dir, o, Mode::kBatched, block_bytes);
  const Result g2_staged = Run(dir, o, Mode::kG2Staged, block_bytes);
  const Result g2_direct = Run(dir, o, Mode::kG2Direct, block_bytes);
  std::printf("| offload | seconds | blocks offloaded | GB offloaded | time / none |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (const auto& [m, r] :
       {std::pair{Mode::kNone, none}, std::pair{Mode::kPerBlock, per_block},
        std::pair{Mode::kBatched, batched}, std::pair{Mode::kG2Staged, g2_staged},
        std::pair{Mode::kG2Direct, g2_direct}}) {
    std::printf("| %s | %.3f | %zu | %.3f | %.3f |\n", Name(m), r.seconds, r.blocks, r.bytes / 1e9,
                r.seconds / none.seconds);
    std::printf("CSV,offload,%s,%.4f,%zu,%zu,%.4f\n", Name(m), r.seconds, r.blocks, r.bytes,
                r.seconds / none.seconds);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
