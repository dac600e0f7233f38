// G3 disk tier bandwidth and per-block latency on a real directory (not a test: numbers only).
// scripts/bench_kvstore_disk.sh runs it side by side with db_bench and fio.
//
//   disk_bench DIR BLOCK_BYTES TOTAL_BYTES SYNC(none|wal|wal-sync) [BUFFERS(aligned|unaligned)]
//              [STAGING(staged|unstaged)]
//
// Write phase: Put every block (distinct hashes, deterministic bytes) into an empty tier big
// enough to hold them all, then Flush (its time counts: the bytes are durable afterwards).
// Read phase: the tier is closed, the files are dropped from the page cache
// (posix_fadvise DONTNEED; the data file is O_DIRECT anyway), the tier reopened (index rebuilt
// from RocksDB), and every block is read, verified, into one buffer: once in store order
// (sequential slots), then once in a random order (latencies from this pass).
// Churn phase: the same Puts into a tier a quarter of the size (eviction on 3 of 4 Puts).
// BUFFERS: the caller's block buffer is page-aligned (default; the host tier's pool is) or
// deliberately not. STAGING: DiskTierOptions::huge_page_staging on (default) or off (then an
// aligned buffer is read and written in place, an unaligned one through a staging copy).
// Every Get is one blocking read, as fio's psync engine at queue depth 1 issues them. Prints
// one line of key=value pairs; MB/s are 2^20 bytes per second.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/kvstore/disk_tier.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using strata::kvstore::DiskTier;
using strata::kvstore::DiskTierOptions;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double PercentileUs(std::vector<double> seconds, double p) {
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const size_t at = std::min(seconds.size() - 1, static_cast<size_t>(p * seconds.size()));
  return seconds[at] * 1e6;
}

void DropPageCache(const fs::path& dir) {
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const int fd = ::open(entry.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

std::unique_ptr<DiskTier> OpenOrDie(const DiskTierOptions& options) {
  auto tier = DiskTier::Create(options);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(tier);
}

strata::BlockHash HashOf(uint64_t i) { return 0x9e3779b97f4a7c15ULL * (i + 1); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 7) {
    std::fprintf(stderr,
                 "usage: %s DIR BLOCK_BYTES TOTAL_BYTES none|wal|wal-sync [aligned|unaligned] "
                 "[staged|unstaged]\n",
                 argv[0]);
    return 2;
  }
  const std::string buffers = argc > 5 ? argv[5] : "aligned";
  const std::string staging = argc > 6 ? argv[6] : "staged";
  if ((buffers != "aligned" && buffers != "unaligned") ||
      (staging != "staged" && staging != "unstaged")) {
    std::fprintf(stderr, "buffers: aligned|unaligned; staging: staged|unstaged\n");
    return 2;
  }
  const bool aligned = buffers == "aligned";
  const fs::path dir = fs::path(argv[1]) / "strata_disk_bench";
  DiskTierOptions options;
  options.path = dir.string();
  options.block_bytes = std::strtoull(argv[2], nullptr, 10);
  const uint64_t blocks = std::strtoull(argv[3], nullptr, 10) / options.block_bytes;
  options.capacity_bytes = static_cast<int64_t>((blocks + 1) * options.block_bytes);
  auto sync = strata::kvstore::ParseDiskSyncMode(argv[4]);
  if (!sync.ok() || blocks == 0) {
    std::fprintf(stderr, "bad sync mode or size\n");
    return 2;
  }
  options.sync = *sync;
  options.huge_page_staging = staging == "staged";
  fs::remove_all(dir);

  // Page-aligned, or one byte past a page boundary.
  std::vector<std::byte> storage(options.block_bytes + 2 * 4096);
  const size_t skew = aligned ? 0 : 1;
  std::byte* base = reinterpret_cast<std::byte*>(
      (reinterpret_cast<uintptr_t>(storage.data()) + 4095) / 4096 * 4096 + skew);
  const std::span<std::byte> block(base, options.block_bytes);
  std::mt19937_64 rng(42);
  for (auto& b : block) b = static_cast<std::byte>(rng());
  std::vector<double> write_lat, read_lat;
  auto tier = OpenOrDie(options);
  const bool direct = tier->direct_io();
  const bool staged = tier->huge_page_staging();
  const auto w0 = Clock::now();
  for (uint64_t i = 0; i < blocks; ++i) {
    std::memcpy(block.data(), &i, sizeof(i));  // distinct contents per block
    const auto t = Clock::now();
    if (absl::Status s = tier->Put({HashOf(i), 0}, block); !s.ok()) {
      std::fprintf(stderr, "put: %s\n", s.ToString().c_str());
      return 1;
    }
    write_lat.push_back(Seconds(Clock::now() - t));
  }
  if (!tier->Flush().ok()) return 1;
  const double write_s = Seconds(Clock::now() - w0);
  tier.reset();
  DropPageCache(dir);

  tier = OpenOrDie(options);
  // Store order first (ascending slots: sequential on disk, as fio reads), then random order
  // (what a cache sees).
  std::vector<uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  const auto s0 = Clock::now();
  for (uint64_t i : order) {
    if (absl::Status s = tier->Get(HashOf(i), block); !s.ok()) {
      std::fprintf(stderr, "get: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const double seq_read_s = Seconds(Clock::now() - s0);
  std::shuffle(order.begin(), order.end(), rng);
  const auto r0 = Clock::now();
  for (uint64_t i : order) {
    const auto t = Clock::now();
    if (absl::Status s = tier->Get(HashOf(i), block); !s.ok()) {
      std::fprintf(stderr, "get: %s\n", s.ToString().c_str());
      return 1;
    }
    read_lat.push_back(Seconds(Clock::now() - t));
  }
  const double read_s = Seconds(Clock::now() - r0);
  tier.reset();
  fs::remove_all(dir);

  // Steady state of a cache: a tier of a quarter of the blocks takes all of them, so three in
  // four Puts also evict (their slots are reused).
  options.capacity_bytes =
      static_cast<int64_t>(std::max<uint64_t>(1, blocks / 4) * options.block_bytes);
  tier = OpenOrDie(options);
  const auto c0 = Clock::now();
  for (uint64_t i = 0; i < blocks; ++i) {
    std::memcpy(block.data(), &i, sizeof(i));
    if (absl::Status s = tier->Put({HashOf(i), 0}, block); !s.ok()) {
      std::fprintf(stderr, "churn put: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (!tier->Flush().ok()) return 1;
  const double churn_s = Seconds(Clock::now() - c0);
  tier.reset();
  fs::remove_all(dir);

  const double mib = static_cast<double>(blocks * options.block_bytes) / (1 << 20);
  std::printf(
      "sync=%s buffers=%s direct_io=%d huge_page_staging=%d block=%zu blocks=%llu "
      "write_MBps=%.0f write_p50_us=%.0f write_p99_us=%.0f seq_read_MBps=%.0f read_MBps=%.0f "
      "read_p50_us=%.0f read_p99_us=%.0f churn_write_MBps=%.0f\n",
      argv[4], buffers.c_str(), direct ? 1 : 0, staged ? 1 : 0, options.block_bytes,
      static_cast<unsigned long long>(blocks), mib / write_s, PercentileUs(write_lat, 0.5),
      PercentileUs(write_lat, 0.99), mib / seq_read_s, mib / read_s, PercentileUs(read_lat, 0.5),
      PercentileUs(read_lat, 0.99), mib / churn_s);
  return 0;
}
