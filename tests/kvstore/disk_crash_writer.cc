// Crash-test helper: writes deterministic blocks (contents a function of the hash, see
// disk_test_util.h) into a DiskTier as fast as it can until it is killed.
//
//   disk_crash_writer PATH BLOCK_BYTES CAPACITY_BLOCKS SYNC(none|wal|wal-sync)
//
// Prints "ready\n" once the tier is open, then "<n>\n" after the n-th Put returned OK (the
// blocks 0..n-1 were acknowledged). Only writes: no reads, so the eviction order is the store
// order and the surviving set after a crash is predictable (see disk_crash_test.cc).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "strata/kvstore/disk_tier.h"

namespace {

bool WriteLine(const std::string& line) {
  // Straight to the pipe (no stdio buffering): a line written is an acknowledgement.
  return ::write(STDOUT_FILENO, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::kvstore;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s PATH BLOCK_BYTES CAPACITY_BLOCKS none|wal|wal-sync\n", argv[0]);
    return 2;
  }
  auto sync = ParseDiskSyncMode(argv[4]);
  if (!sync.ok()) {
    std::fprintf(stderr, "%s\n", sync.status().ToString().c_str());
    return 2;
  }
  DiskTierOptions options;
  options.path = argv[1];
  options.block_bytes = std::strtoull(argv[2], nullptr, 10);
  options.capacity_bytes =
      std::strtoll(argv[3], nullptr, 10) * static_cast<int64_t>(options.block_bytes);
  options.sync = *sync;
  options.write_buffer_bytes = 64 * options.block_bytes;  // kNoWal: flush the index often
  auto tier = DiskTier::Create(options);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  if (!WriteLine("ready\n")) return 1;
  std::vector<std::byte> block(options.block_bytes);
  for (uint64_t i = 0; i < (uint64_t{1} << 31); ++i) {
    const strata::BlockHash hash = testing::CrashBlockHash(i);
    testing::FillBlock(hash, block);
    const strata::BlockHash parent =
        i == 0 ? strata::kRootBlockHash : testing::CrashBlockHash(i - 1);
    absl::Status s = (*tier)->Put({hash, parent}, block);
    if (!s.ok()) {
      std::fprintf(stderr, "put %llu: %s\n", static_cast<unsigned long long>(i),
                   s.ToString().c_str());
      return 1;
    }
    if (!WriteLine(std::to_string(i + 1) + "\n")) return 1;
  }
  return 0;
}
