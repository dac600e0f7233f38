// The CUDA plugin's batched copy (copy_runs) against one plain copy of the same bytes: whole
// blocks of a pool picked by a random permutation of block ids, packed in order into the
// destination (the KV transfer's gather), for total sizes of 128 MiB, 1 GiB and 4 GiB and blocks
// of 128 KiB and 2 MiB. Device to device against one cudaMemcpyAsync; device to page-locked
// host and back against one cudaMemcpyAsync between the same buffers.
//
// copy_runs runs on a stream the plugin owns (the ABI hands out no cudaStream_t to record
// events on), so every side is timed the same way on the host clock: `kBatch` copies enqueued
// back to back, then one synchronize; the time per copy is the batch's over kBatch, the median
// of kRepeats batches after a warm-up batch.
//
//   copy_bench [--quick] [--plugin PATH]   (default: libstrata_cuda.so next to the binary)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "strata/plugin/plugin.h"

namespace strata::cuda::bench {
namespace {

constexpr int kBatch = 5;
constexpr int kRepeats = 5;

#define BENCH_OK(expr)                                                                 \
  do {                                                                                 \
    const absl::Status st_ = (expr);                                                   \
    if (!st_.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, st_.ToString().c_str()); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

std::string DefaultPlugin() {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, n) : std::string("./x");
  dir.resize(dir.rfind('/'));
  return dir + "/libstrata_cuda.so";
}

// Seconds per call of `enqueue` (which enqueues one copy), by the rule in the file comment.
double SecondsPerCopy(const std::function<void()>& enqueue, const std::function<void()>& sync) {
  std::vector<double> times;
  for (int rep = 0; rep <= kRepeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) enqueue();
    sync();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) times.push_back(s / kBatch);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Block `perm[i]` of the pool to slot i of the packed side (`to_pool` reverses the direction).
std::vector<strata_copy_run> GatherRuns(uint64_t total, uint64_t block, bool to_pool,
                                        std::mt19937_64& rng) {
  std::vector<uint64_t> perm(total / block);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<strata_copy_run> runs(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    const uint64_t pool = perm[i] * block, packed = i * block;
    runs[i] = {to_pool ? packed : pool, to_pool ? pool : packed, block};
  }
  return runs;
}

struct Buffers {
  void* a = nullptr;     // device: the pool
  void* b = nullptr;     // device: the packed side of device-to-device copies
  void* host = nullptr;  // page-locked host: the packed side of host copies
};

void Row(const char* what, uint64_t total, uint64_t block, size_t runs, double ours, double plain) {
  const double gb = static_cast<double>(total) / 1e9;
  std::printf("| %s | %llu MiB | %llu KiB | %zu | %.1f | %.1f | %.2f |\n", what,
              static_cast<unsigned long long>(total >> 20),
              static_cast<unsigned long long>(block >> 10), runs, gb / ours, gb / plain,
              plain / ours);
  std::fflush(stdout);
}

void RunShape(Backend& be, const Buffers& buf, cudaStream_t plain_stream, uint64_t total,
              uint64_t block, std::mt19937_64& rng) {
  auto sync_ours = [&] { BENCH_OK(be.Synchronize()); };
  auto sync_plain = [&] { BENCH_CHECK(cudaStreamSynchronize(plain_stream)); };
  struct Case {
    const char* what;
    void* dst;
    const void* src;
    bool to_pool;
  };
  const Case cases[] = {{"device -> device", buf.b, buf.a, false},
                        {"device -> pinned host", buf.host, buf.a, false},
                        {"pinned host -> device", buf.a, buf.host, true}};
  for (const Case& c : cases) {
    const std::vector<strata_copy_run> runs = GatherRuns(total, block, c.to_pool, rng);
    const double ours =
        SecondsPerCopy([&] { BENCH_OK(be.CopyRuns(nullptr, c.dst, c.src, runs)); }, sync_ours);
    const double plain = SecondsPerCopy(
        [&] { BENCH_CHECK(cudaMemcpyAsync(c.dst, c.src, total, cudaMemcpyDefault, plain_stream)); },
        sync_plain);
    Row(c.what, total, block, runs.size(), ours, plain);
  }
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string plugin_path = DefaultPlugin();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--plugin" && i + 1 < argc) {
      plugin_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: copy_bench [--quick] [--plugin PATH]\n");
      return 2;
    }
  }
  auto plugin = Plugin::Load(plugin_path);
  BENCH_OK(plugin.status());
  auto backend = Backend::Create(*plugin);
  BENCH_OK(backend.status());
  Backend& be = **backend;
  if (!be.plugin().has_copy_runs() || !be.plugin().has_host_register()) {
    std::fprintf(stderr, "%s lacks copy_runs or host_register\n", plugin_path.c_str());
    return 1;
  }
  const std::vector<uint64_t> totals =
      quick ? std::vector<uint64_t>{uint64_t{128} << 20, uint64_t{1} << 30}
            : std::vector<uint64_t>{uint64_t{128} << 20, uint64_t{1} << 30, uint64_t{4} << 30};
  const uint64_t most = totals.back();
  Buffers buf;
  auto a = be.Alloc(most), b = be.Alloc(most);
  BENCH_OK(a.status());
  BENCH_OK(b.status());
  buf.a = *a;
  buf.b = *b;
  BENCH_CHECK(cudaMemset(buf.a, 1, most));
  buf.host = std::aligned_alloc(4096, most);
  if (buf.host == nullptr) return 1;
  std::memset(buf.host, 2, most);
  BENCH_OK(be.RegisterHost(buf.host, most));
  cudaStream_t plain_stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&plain_stream, cudaStreamNonBlocking));
  BENCH_CHECK(cudaDeviceSynchronize());

  std::printf("%s, %s\n", be.info().device_name, plugin_path.c_str());
  std::printf("| copy | total | block | runs | copy_runs GB/s | one memcpy GB/s | ratio |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(0x5eed);
  for (uint64_t total : totals) {
    for (uint64_t block : {uint64_t{128} << 10, uint64_t{2} << 20}) {
      RunShape(be, buf, plain_stream, total, block, rng);
    }
  }
  BENCH_CHECK(cudaStreamDestroy(plain_stream));
  be.UnregisterHost(buf.host);
  std::free(buf.host);
  be.Free(buf.a);
  be.Free(buf.b);
  return 0;
}

}  // namespace
}  // namespace strata::cuda::bench

int main(int argc, char** argv) { return strata::cuda::bench::Main(argc, argv); }
