// G4 bandwidth: RemoteTier PutRun / GetRun against a running `strata kvstore` daemon (another
// process), for one block size. Not a test: scripts/bench_kvstore_remote.sh runs it next to
// ucx_perftest at the same sizes and prints the ratios.
//
//   kvstore_remote_bench HOST:PORT BLOCK_BYTES [SECONDS] [--registered] [--pieces N]
// prints "BLOCK_BYTES PUT_MBPS GET_MBPS PUT_US GET_US" (MB = 2^20 bytes). Bandwidth: each call
// moves a run of blocks of about 16 MiB (at least one block): one ReserveWrite/Acquire and one
// transfer per run (the commit/release rides on the next one; remote_tier.h). Puts use fresh
// hashes every time (the daemon evicts old ones); gets read one run that stays resident.
// Latency: the mean time of a single-block Put / Get, each about SECONDS/2. Every timed loop
// ends with RemoteTier::Flush (what is still owed), inside the time.
// --registered: the source and destination buffers are registered once with
// RemoteTier::RegisterRegion, so every put/get moves blocks straight between them and the
// daemon's pool (no staging copy; checksums computed/verified in place). Without it, they are
// plain heap memory and go through the tier's staging lanes.
// --pieces N: two staging lanes of about 1/N of a run each (default: one lane of a whole run),
// so a staged run moves in N pieces (one ReserveWrite/Acquire and one transfer each; a put
// pipelines them, remote_tier.h). Registered runs stay one piece (kMaxKvBlocksPerRequest blocks).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "strata/kvstore/remote_tier.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct Latency {
  double put_us = 0, get_us = 0;
  std::string error;
};

// Mean time of one single-block Put (a fresh hash: ReserveWrite carrying the last commit, copy,
// transfer) and one single-block Get of a resident block (Acquire carrying the last release,
// transfer, verify, copy), for about `seconds` each.
Latency MeasureLatency(strata::kvstore::RemoteTier& tier, std::span<const std::byte> data,
                       std::span<std::byte> out_buffer, uint64_t& next,
                       strata::BlockHash resident, double seconds) {
  Latency lat;
  const size_t block = tier.block_bytes();
  // Gets first: the puts below may evict the resident block.
  std::span<std::byte> out = out_buffer.first(block);
  int64_t n = 0;
  auto start = Clock::now();
  while (Seconds(start) < seconds / 2 || n < 10) {
    if (auto s = tier.Get(resident, out); !s.ok()) {
      lat.error = "get: " + s.ToString();
      return lat;
    }
    ++n;
  }
  tier.Flush();
  lat.get_us = Seconds(start) * 1e6 / static_cast<double>(n);
  std::span<const std::byte> one(data.data(), block);
  n = 0;
  start = Clock::now();
  while (Seconds(start) < seconds / 2 || n < 10) {
    if (auto s = tier.Put({.hash = next++, .parent = 0}, one); !s.ok()) {
      lat.error = "put: " + s.ToString();
      return lat;
    }
    ++n;
  }
  tier.Flush();
  lat.put_us = Seconds(start) * 1e6 / static_cast<double>(n);
  return lat;
}

}  // namespace

int main(int argc, char** argv) {
  bool registered = false;
  size_t pieces = 1;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--registered") {
      registered = true;
    } else if (a == "--pieces" && i + 1 < argc) {
      pieces = std::max<size_t>(1, std::strtoull(argv[++i], nullptr, 10));
    } else {
      args.push_back(a);
    }
  }
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s HOST:PORT BLOCK_BYTES [SECONDS] [--registered] [--pieces N]\n",
                 argv[0]);
    return 2;
  }
  const size_t block = std::strtoull(args[1].c_str(), nullptr, 10);
  const double seconds = args.size() > 2 ? std::atof(args[2].c_str()) : 1.0;
  const size_t run = std::max<size_t>(1, (16u << 20) / block);
  strata::kvstore::RemoteTierOptions o;
  o.daemons = {args[0]};
  o.block_bytes = block;
  o.agent_name = "kv-bench-" + std::to_string(::getpid());
  o.lanes = pieces > 1 ? 2 : 1;
  o.staging_bytes = size_t(o.lanes) * ((run + pieces - 1) / pieces) * block;
  auto tier = strata::kvstore::RemoteTier::Create(o);
  if (!tier.ok() || (*tier)->connected_daemons() != 1) {
    std::fprintf(stderr, "cannot connect: %s\n",
                 tier.ok() ? "daemon unreachable" : tier.status().ToString().c_str());
    return 1;
  }
  // One buffer: the source run, then the destination run.
  std::vector<std::byte> memory(2 * run * block);
  std::span<std::byte> data(memory.data(), run * block);
  std::span<std::byte> out(memory.data() + run * block, run * block);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + 7);
  if (registered) {
    if (auto r = (*tier)->RegisterRegion(memory.data(), memory.size()); !r.ok()) {
      std::fprintf(stderr, "register: %s\n", r.status().ToString().c_str());
      return 1;
    }
  }
  std::vector<strata::kvstore::BlockMeta> metas(run);
  uint64_t next = (uint64_t(::getpid()) << 32) + 1;  // fresh hashes on a shared daemon
  auto put_run = [&] {
    for (auto& m : metas) m = {.hash = next++, .parent = 0};
    return (*tier)->PutRun(metas, data);
  };
  // Warm up (connect, and write 320 MiB, more than the script's 256 MiB daemon pool, so every
  // page of the pool is mapped on both sides before timing) and keep the last run resident
  // for the gets.
  const size_t warmup_runs = std::max<size_t>(3, (size_t{320} << 20) / data.size());
  for (size_t i = 0; i < warmup_runs; ++i) {
    if (auto s = put_run(); !s.ok()) {
      std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<strata::BlockHash> hashes;
  for (const auto& m : metas) hashes.push_back(m.hash);
  size_t put_bytes = 0;
  auto start = Clock::now();
  while (Seconds(start) < seconds) {
    if (auto s = put_run(); !s.ok()) {
      std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
      return 1;
    }
    put_bytes += data.size();
  }
  (*tier)->Flush();
  const double put_mbps = put_bytes / Seconds(start) / (1 << 20);
  // The resident run: store it again under its old hashes (the puts above may have evicted it).
  for (size_t i = 0; i < run; ++i) metas[i].hash = hashes[i];
  if (auto s = (*tier)->PutRun(metas, data); !s.ok()) {
    std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
    return 1;
  }
  size_t get_bytes = 0;
  start = Clock::now();
  while (Seconds(start) < seconds) {
    auto n = (*tier)->GetRun(hashes, out);
    if (!n.ok() || *n != static_cast<int>(run)) {
      std::fprintf(stderr, "get: %s\n", n.ok() ? "short read" : n.status().ToString().c_str());
      return 1;
    }
    get_bytes += out.size();
  }
  (*tier)->Flush();
  const double get_mbps = get_bytes / Seconds(start) / (1 << 20);
  const Latency lat = MeasureLatency(**tier, data, out, next, hashes.front(), seconds);
  if (!lat.error.empty()) {
    std::fprintf(stderr, "%s\n", lat.error.c_str());
    return 1;
  }
  const strata::kvstore::RemotePathStats paths = (*tier)->path_stats();
  std::fprintf(stderr, "blocks moved: %lld direct, %lld staged\n",
               static_cast<long long>(paths.direct_blocks),
               static_cast<long long>(paths.staged_blocks));
  std::printf("%zu %.0f %.0f %.1f %.1f\n", block, put_mbps, get_mbps, lat.put_us, lat.get_us);
  return 0;
}
