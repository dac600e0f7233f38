// Crash safety of the G3 tier: a writer process is SIGKILLed in the middle of heavy writes,
// then the tier is reopened on the same path and must (1) open, (2) hold exactly what a
// point-in-time prefix of the writes leaves (and, with a write-ahead log, every acknowledged
// block), (3) serve only blocks that verify and equal their deterministic contents, (4) never
// serve a value corrupted on disk, and (5) keep working: writes, reads, eviction, reopen.
//
// CI runs a few iterations; scripts/soak_kvstore_crash.sh runs many through
//   STRATA_CRASH_ITERATIONS (default 3) and STRATA_CRASH_SEED (default 20261130).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "disk_tier_internal.h"
#include "gtest/gtest.h"
#include "strata/kvstore/disk_tier.h"

namespace strata::kvstore {
namespace {

namespace fs = std::filesystem;
using testing::CrashBlockHash;
using testing::CrashBlockIndex;
using testing::MakeBlock;

constexpr size_t kBlock = 16 << 10;
constexpr int64_t kCapacityBlocks = 192;
constexpr size_t kWriteBufferBlocks = 64;  // disk_crash_writer's index flush interval
constexpr const char* kModeNames[] = {"wal", "none", "wal-sync"};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : std::atoi(v);
}

// The running writer: its pid and the read end of its stdout.
struct Writer {
  pid_t pid = -1;
  int out = -1;
  uint64_t acked = 0;  // the last "<n>" line read
  std::string pending;
};

Writer StartWriter(const fs::path& dir, const char* mode) {
  int pipefd[2];
  Writer w;
  if (::pipe(pipefd) != 0) return w;
  w.pid = ::fork();
  if (w.pid == 0) {
    ::dup2(pipefd[1], STDOUT_FILENO);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    const std::string block = std::to_string(kBlock), cap = std::to_string(kCapacityBlocks);
    ::execl(STRATA_DISK_CRASH_WRITER, STRATA_DISK_CRASH_WRITER, dir.c_str(), block.c_str(),
            cap.c_str(), mode, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  w.out = pipefd[0];
  return w;
}

// Reads what the writer printed within `timeout_ms` (or until EOF when timeout_ms < 0, or
// until "ready" when `stop_when_ready`); returns false on EOF.
bool ReadWriter(Writer* w, int timeout_ms, bool* ready, bool stop_when_ready = false) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (true) {
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      wait_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     deadline - std::chrono::steady_clock::now())
                                     .count());
      if (wait_ms <= 0) return true;
    }
    pollfd p{w->out, POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return true;
    const ssize_t n = ::read(w->out, buf, sizeof(buf));
    if (n <= 0) return false;
    w->pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = w->pending.find('\n')) != std::string::npos) {
      const std::string line = w->pending.substr(0, nl);
      w->pending.erase(0, nl + 1);
      if (line == "ready") {
        *ready = true;
      } else {
        w->acked = std::stoull(line);
      }
    }
    if (stop_when_ready && *ready) return true;
  }
}

DiskTierOptions TierOptions(const fs::path& dir, const char* mode) {
  DiskTierOptions o;
  o.path = dir.string();
  o.block_bytes = kBlock;
  o.capacity_bytes = kCapacityBlocks * static_cast<int64_t>(kBlock);
  o.sync = *ParseDiskSyncMode(mode);
  o.write_buffer_bytes = kWriteBufferBlocks * kBlock;  // as the writer: same spare slots
  return o;
}

// Checks what survived: a contiguous run of the most recent writes, all verifying. Returns the
// index one past the newest block held.
uint64_t VerifySurvivors(DiskTier& tier, const char* mode, uint64_t acked) {
  std::vector<uint64_t> present;
  for (const BlockMeta& m : tier.Blocks()) {
    uint64_t i = 0;
    EXPECT_TRUE(CrashBlockIndex(m.hash, &i)) << "unknown hash " << m.hash;
    present.push_back(i);
    EXPECT_EQ(m.parent, i == 0 ? kRootBlockHash : CrashBlockHash(i - 1));
  }
  std::sort(present.begin(), present.end());
  const uint64_t end = present.empty() ? 0 : present.back() + 1;
  EXPECT_EQ(present.size(), std::min<uint64_t>(end, kCapacityBlocks)) << mode;
  for (size_t k = 0; k < present.size(); ++k) {
    EXPECT_EQ(present[k], end - present.size() + k) << "not a contiguous suffix, " << mode;
  }
  if (std::string(mode) != "none") {
    EXPECT_GE(end, acked) << "an acknowledged block was lost with a write-ahead log";
  }
  std::vector<std::byte> dst(kBlock);
  for (uint64_t i : present) {
    absl::Status s = tier.Get(CrashBlockHash(i), dst);
    EXPECT_TRUE(s.ok()) << i << ": " << s;
    if (s.ok()) {
      EXPECT_TRUE(dst == MakeBlock(CrashBlockHash(i), kBlock)) << i;
    }
  }
  EXPECT_EQ(tier.stats().checksum_failures, 0);
  return end;
}

// Flips a payload byte of the held block `hash`, whose slot starts at `offset`, in the data file.
bool CorruptSlot(const DiskTierOptions& options, uint64_t offset) {
  return testing::FlipByte(options.path + "/" + disk_internal::kDataFileName, offset + kBlock / 2,
                           0x10);
}

// After the crash: new writes, reads and eviction work, and survive a clean reopen.
void ExpectKeepsWorking(DiskTier& tier, uint64_t first) {
  const int64_t evictions_before = tier.stats().evictions;
  for (uint64_t i = first; i < first + kCapacityBlocks + 10; ++i) {
    const absl::Status put =
        tier.Put({CrashBlockHash(i), CrashBlockHash(i - 1)}, MakeBlock(CrashBlockHash(i), kBlock));
    ASSERT_TRUE(put.ok()) << "block " << i << ": " << put;
    ASSERT_LE(tier.usage().bytes, tier.usage().capacity_bytes);
  }
  EXPECT_GE(tier.stats().evictions - evictions_before, 10);
  std::vector<std::byte> dst(kBlock);
  for (uint64_t i = first + kCapacityBlocks; i < first + kCapacityBlocks + 10; ++i) {
    const absl::Status got = tier.Get(CrashBlockHash(i), dst);
    ASSERT_TRUE(got.ok()) << "block " << i << ": " << got;
    EXPECT_TRUE(dst == MakeBlock(CrashBlockHash(i), kBlock));
  }
}

void RunIteration(int iteration, std::mt19937_64& rng) {
  const char* mode = kModeNames[iteration % 3];
  const fs::path dir =
      fs::path(::testing::TempDir()) /
      ("strata_disk_crash_" + std::to_string(::getpid()) + "_" + std::to_string(iteration));
  fs::remove_all(dir);
  Writer w = StartWriter(dir, mode);
  ASSERT_GT(w.pid, 0);
  bool ready = false;
  ReadWriter(&w, 10000, &ready, /*stop_when_ready=*/true);
  ASSERT_TRUE(ready) << "writer did not open the tier";
  const int delay_ms = std::uniform_int_distribution<int>(50, 800)(rng);
  ReadWriter(&w, delay_ms, &ready);
  ASSERT_EQ(::kill(w.pid, SIGKILL), 0);
  int wstatus = 0;
  ::waitpid(w.pid, &wstatus, 0);
  ReadWriter(&w, -1, &ready);  // acknowledgements already in the pipe count too
  ::close(w.out);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer exited early: " << wstatus;

  const auto t0 = std::chrono::steady_clock::now();
  const DiskTierOptions options = TierOptions(dir, mode);
  uint64_t end = 0;
  std::vector<BlockMeta> blocks;
  uint64_t corrupt_offset = 0;
  {
    auto tier = DiskTier::Create(options);
    ASSERT_TRUE(tier.ok()) << tier.status();
    end = VerifySurvivors(**tier, mode, w.acked);
    blocks = (*tier)->Blocks();
    if (!blocks.empty()) corrupt_offset = *(*tier)->SlotOffsetForTest(blocks.front().hash);
  }
  BlockHash corrupted = 0;
  if (!blocks.empty()) {
    ASSERT_TRUE(CorruptSlot(options, corrupt_offset));
    corrupted = blocks.front().hash;
  }
  auto tier = DiskTier::Create(options);
  ASSERT_TRUE(tier.ok()) << tier.status();
  if (!blocks.empty()) {
    std::vector<std::byte> dst(kBlock);
    EXPECT_EQ((*tier)->Get(corrupted, dst).code(), absl::StatusCode::kDataLoss);
    EXPECT_FALSE((*tier)->Contains(corrupted));
    EXPECT_EQ((*tier)->stats().checksum_failures, 1);
  }
  ExpectKeepsWorking(**tier, end + 1);
  tier->reset();
  auto reopened = DiskTier::Create(options);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->usage().blocks, kCapacityBlocks);
  const auto check_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  std::printf(
      "crash %d mode=%s killed_after_ms=%d acked=%llu held=%zu newest=%llu corrupt_dropped=%d "
      "check_ms=%lld\n",
      iteration, mode, delay_ms, static_cast<unsigned long long>(w.acked), blocks.size(),
      static_cast<unsigned long long>(end), corrupted != 0 ? 1 : 0,
      static_cast<long long>(check_ms));
  reopened->reset();
  fs::remove_all(dir);
}

TEST(DiskCrashTest, SigkillDuringWritesThenReopen) {
  const int iterations = EnvInt("STRATA_CRASH_ITERATIONS", 3);
  std::mt19937_64 rng(static_cast<uint64_t>(EnvInt("STRATA_CRASH_SEED", 20261130)));
  int failed = 0;
  for (int i = 0; i < iterations; ++i) {
    RunIteration(i, rng);
    if (HasFailure()) {
      ++failed;
      break;  // keep the first failure's output readable
    }
  }
  std::printf("crash summary: iterations=%d failed=%d\n", iterations, failed);
}

}  // namespace
}  // namespace strata::kvstore
