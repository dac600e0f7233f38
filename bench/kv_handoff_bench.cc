// KV handoff between two processes on one device: one request's KV moves from a "prefill"
// process's pool into the blocks a "decode" process reserved (scattered block ids on both
// sides, as in a used pool: one run per block), timed against the limit of the same path:
//
//   --path ipc     the transport maps the decode pool; against one copy_d2d of the same bytes
//                  from the same source into another allocation of the decode process mapped
//                  the same way.
//   --path staged  the transport stages the write through page-locked host buffers and UCX
//                  (the path between hosts); against one device-to-host copy of the same bytes
//                  into page-locked host memory plus one host-to-device copy into another
//                  allocation of the decode process (mapped, so the prefill process issues it).
//                  Also times the UCX leg alone: one host-to-host write of the same bytes
//                  between the same two agents ("ucx" columns), the pipeline's third stage.
//
// Both sides use the plugin named by --plugin.
//
//   kv_handoff_bench --plugin cuda [--path ipc|staged] [--tokens 1024,8192,32768] [--iters 10]
//                    [--piece-mib 4 --slots 4]
//                    [--layers 32 --kv-heads 8 --head-dim 128 --block-tokens 16 --elem-bytes 2]
//
// The defaults are Llama-3.1-8B's KV shape in bf16 (2 MiB per 16-token block). Before timing, a
// handoff's bytes are checked in the decode process against the pattern the prefill side wrote.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "strata/plugin/plugin.h"
#include "strata/transport/agent.h"
#include "strata/worker/plugin_device_memory.h"
#include "test_util.h"

namespace strata {
namespace {

using transport::testing::Fnv1a;
using transport::testing::PatternByte;
using transport::testing::RecvFrame;
using transport::testing::SendFrame;

struct Options {
  std::string plugin = "cuda";
  std::vector<int64_t> tokens = {1024, 8192, 32768};
  int iters = 10;
  bool staged = false;
  int64_t piece_mib = 4, slots = 4;
  int64_t layers = 32, kv_heads = 8, head_dim = 128, block_tokens = 16, elem_bytes = 2;
  int64_t block_bytes() const { return layers * 2 * block_tokens * kv_heads * head_dim * elem_bytes; }
  int64_t max_blocks() const {
    return (*std::max_element(tokens.begin(), tokens.end()) + block_tokens - 1) / block_tokens;
  }
};

[[noreturn]] void Die(const std::string& what, const std::string& why) {
  std::fprintf(stderr, "kv_handoff_bench: %s: %s\n", what.c_str(), why.c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(what, v.status().ToString());
  return std::move(*v);
}

void Must(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(what, s.ToString());
}

// A block's bytes as the prefill side fills them.
std::vector<char> BlockPattern(int64_t block, int64_t bytes) {
  std::vector<char> out(bytes);
  for (int64_t i = 0; i < bytes; ++i) out[i] = PatternByte(block, i);
  return out;
}

struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<worker::PluginDeviceMemory> device;
  std::unique_ptr<transport::Agent> agent;
  void* pool = nullptr;
  uint64_t region = 0;
};

Side MakeSide(const Options& o, const std::string& name, int64_t pool_blocks) {
  Side s;
  auto plugin = Must(LoadPlugin(o.plugin), "load plugin");
  s.backend = Must(Backend::Create(plugin), "create backend");
  s.device = Must(worker::PluginDeviceMemory::Create(s.backend.get()), "device memory");
  transport::AgentOptions ao;
  ao.name = name;
  ao.device = s.device.get();
  if (o.staged) ao.device_path = transport::AgentOptions::DevicePath::kStaged;
  ao.staging_piece_bytes = static_cast<size_t>(o.piece_mib) << 20;
  ao.staging_slots = static_cast<int>(o.slots);
  s.agent = Must(transport::Agent::Create(ao), "agent");
  s.pool = Must(s.backend->Alloc(pool_blocks * o.block_bytes()), "alloc pool");
  s.region = Must(s.agent->RegisterMemory(s.pool, pool_blocks * o.block_bytes(),
                                          transport::MemoryKind::kDevice),
                  "register pool");
  return s;
}

// The decode process: exports its pool (through the agent) and a second allocation of the same
// size (the baseline's target), then answers check requests until told to stop.
int RunDecode(const Options& o, int fd) {
  const int64_t blocks = 2 * o.max_blocks();
  Side s = MakeSide(o, "decode", blocks);
  void* baseline = Must(s.backend->Alloc(o.max_blocks() * o.block_bytes()), "alloc baseline");
  SendFrame(fd, s.agent->Metadata());
  SendFrame(fd, Must(s.agent->ExportRegion(s.region), "export"));
  SendFrame(fd, Must(s.device->Export(baseline), "export baseline"));
  // The staged path's UCX leg alone: a host region as large as the largest request.
  if (o.staged) {
    auto host = Must(s.agent->AllocateMemory(o.max_blocks() * o.block_bytes()), "host region");
    SendFrame(fd, Must(s.agent->ExportRegion(host.region), "export host region"));
  }
  while (auto msg = RecvFrame(fd)) {
    if (*msg == "stop") break;
    // "check": pairs (src block, dst block) as int64; reply the number of wrong blocks.
    std::vector<int64_t> pairs(msg->size() / sizeof(int64_t));
    std::memcpy(pairs.data(), msg->data(), pairs.size() * sizeof(int64_t));
    int wrong = 0;
    std::vector<char> got(o.block_bytes());
    for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
      Must(s.backend->CopyToHost(got.data(),
                                 static_cast<char*>(s.pool) + pairs[i + 1] * o.block_bytes(),
                                 got.size()),
           "read back");
      const std::vector<char> want = BlockPattern(pairs[i], o.block_bytes());
      if (Fnv1a(got.data(), got.size()) != Fnv1a(want.data(), want.size())) ++wrong;
    }
    SendFrame(fd, std::to_string(wrong));
  }
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// `n` distinct block ids out of [0, range), shuffled: a used pool's free list.
std::vector<int64_t> Scattered(int64_t n, int64_t range, std::mt19937_64& rng) {
  std::vector<int64_t> all(range);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

int RunPrefill(const Options& o, int fd) {
  const int64_t blocks = 2 * o.max_blocks();
  Side s = MakeSide(o, "prefill", blocks);
  const std::string meta = *RecvFrame(fd), blob = *RecvFrame(fd), handle = *RecvFrame(fd);
  const std::string host_blob = o.staged ? *RecvFrame(fd) : std::string();
  Must(s.agent->AddPeer("decode", meta), "add peer");
  const uint64_t remote = Must(s.agent->ImportRegion("decode", blob), "import");
  std::printf("path: %s (%s)\n", Must(s.agent->RegionPath(remote), "path").c_str(),
              s.device->Describe().c_str());
  void* baseline = Must(s.device->Open(handle), "open baseline");
  strata_stream stream = nullptr;
  Must(s.backend->Check(s.backend->api().stream_create(s.backend->handle(), &stream), "stream"),
       "stream");
  const uint64_t bb = o.block_bytes();
  // The staged baseline's page-locked host buffer (as large as the largest request).
  std::vector<char> host;
  uint64_t host_local = 0, host_remote = 0;
  if (o.staged) {
    host.resize(o.max_blocks() * bb);
    Must(s.device->RegisterHost(host.data(), host.size()), "page-lock baseline host buffer");
    host_local = Must(s.agent->RegisterMemory(host.data(), host.size()), "register host");
    host_remote = Must(s.agent->ImportRegion("decode", host_blob), "import host region");
  }
  std::printf("%s: %s\n", o.staged ? "staged path" : "ipc path",
              s.agent->DevicePaths().c_str());
  std::mt19937_64 rng(42);
  std::printf("block %llu B; median of %d\n", static_cast<unsigned long long>(bb), o.iters);
  std::printf("%8s %7s %10s %7s %12s %9s %12s %9s %7s", "tokens", "blocks", "MiB", "runs",
              "handoff ms", "GB/s", o.staged ? "d2h+h2d ms" : "memcpy ms", "GB/s", "ratio");
  if (o.staged) std::printf(" %10s %9s", "ucx ms", "GB/s");
  std::printf("\n");
  bool checked = false;
  for (int64_t tokens : o.tokens) {
    const int64_t n = (tokens + o.block_tokens - 1) / o.block_tokens;
    const std::vector<int64_t> src = Scattered(n, blocks, rng), dst = Scattered(n, blocks, rng);
    std::vector<transport::Run> runs;
    for (int64_t i = 0; i < n; ++i) runs.push_back({src[i] * bb, dst[i] * bb, bb});
    if (!checked) {  // the bytes land where they should
      std::vector<int64_t> pairs;
      for (int64_t i = 0; i < std::min<int64_t>(n, 16); ++i) {
        const std::vector<char> p = BlockPattern(src[i], bb);
        Must(s.backend->CopyToDevice(static_cast<char*>(s.pool) + src[i] * bb, p.data(), bb),
             "fill");
        pairs.insert(pairs.end(), {src[i], dst[i]});
      }
      Must(s.backend->Synchronize(), "fill sync");
      const uint64_t t = Must(s.agent->PostWrite("decode", s.region, remote, runs), "post");
      Must(s.agent->Wait(t, absl::Seconds(60)), "wait");
      s.agent->Release(t);
      SendFrame(fd, std::string(reinterpret_cast<const char*>(pairs.data()),
                                pairs.size() * sizeof(int64_t)));
      const std::string wrong = *RecvFrame(fd);
      std::printf("check: %zu blocks, %s wrong\n", pairs.size() / 2, wrong.c_str());
      if (wrong != "0") Die("check", "handoff bytes differ from the source");
      checked = true;
    }
    std::vector<double> handoff, memcpy_ms, ucx_ms;
    for (int it = 0; it < o.iters + 1; ++it) {
      auto t0 = std::chrono::steady_clock::now();
      const uint64_t t = Must(s.agent->PostWrite("decode", s.region, remote, runs), "post");
      Must(s.agent->Wait(t, absl::Seconds(60)), "wait");
      s.agent->Release(t);
      auto t1 = std::chrono::steady_clock::now();
      if (o.staged) {
        // One copy each way, through the same page-locked memory the staged path would use.
        const transport::CopyRun whole{0, 0, static_cast<uint64_t>(n) * bb};
        Must(s.device->Copy(host.data(), s.pool, std::span<const transport::CopyRun>(&whole, 1)),
             "d2h");
        Must(s.device->Copy(baseline, host.data(), std::span<const transport::CopyRun>(&whole, 1)),
             "h2d");
      } else {
        Must(s.backend->Check(s.backend->api().copy_d2d(s.backend->handle(), stream, baseline,
                                                         s.pool, n * bb),
                              "copy_d2d"),
             "copy_d2d");
        Must(s.backend->Check(s.backend->api().stream_synchronize(s.backend->handle(), stream),
                              "sync"),
             "sync");
      }
      auto t2 = std::chrono::steady_clock::now();
      if (o.staged) {  // the UCX leg alone: host to host, one run of the same bytes
        const transport::Run whole{0, 0, static_cast<uint64_t>(n) * bb};
        const uint64_t t = Must(s.agent->PostWrite("decode", host_local, host_remote,
                                                   std::span<const transport::Run>(&whole, 1)),
                                "post host");
        Must(s.agent->Wait(t, absl::Seconds(60)), "wait host");
        s.agent->Release(t);
      }
      auto t3 = std::chrono::steady_clock::now();
      if (it == 0) continue;  // warm-up
      ucx_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
      handoff.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      memcpy_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    const double h = Median(handoff), m = Median(memcpy_ms), gb = double(n * bb) / 1e9;
    std::printf("%8lld %7lld %10.0f %7zu %12.3f %9.1f %12.3f %9.1f %7.3f",
                static_cast<long long>(tokens), static_cast<long long>(n),
                double(n * bb) / (1 << 20), runs.size(), h, gb / (h / 1e3), m, gb / (m / 1e3),
                m / h);
    if (o.staged) {
      const double u = Median(ucx_ms);
      std::printf(" %10.3f %9.1f", u, gb / (u / 1e3));
    }
    std::printf("\n");
  }
  const transport::AgentStats st = s.agent->Stats();
  std::printf("device copies %llu, bytes %llu; staged pieces %llu, bytes %llu\n",
              static_cast<unsigned long long>(st.device_copies),
              static_cast<unsigned long long>(st.device_bytes),
              static_cast<unsigned long long>(st.staged_pieces_sent),
              static_cast<unsigned long long>(st.staged_bytes_sent));
  SendFrame(fd, "stop");
  if (o.staged) s.device->UnregisterHost(host.data());
  s.device->Close(baseline);
  s.backend->api().stream_destroy(s.backend->handle(), stream);
  return 0;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    auto num = [&](int64_t* out) {
      if (!absl::SimpleAtoi(v, out) || *out <= 0) Die(k, "needs a positive integer, got " + v);
    };
    if (k == "--plugin") {
      o.plugin = v;
    } else if (k == "--path") {
      if (v != "ipc" && v != "staged") Die(k, "is ipc or staged, got " + v);
      o.staged = v == "staged";
    } else if (k == "--piece-mib") {
      num(&o.piece_mib);
    } else if (k == "--slots") {
      num(&o.slots);
    } else if (k == "--tokens") {
      o.tokens.clear();
      for (absl::string_view t : absl::StrSplit(v, ',')) {
        int64_t x = 0;
        if (!absl::SimpleAtoi(t, &x) || x <= 0) Die(k, "needs positive integers, got " + v);
        o.tokens.push_back(x);
      }
    } else if (k == "--iters") {
      int64_t x = 0;
      num(&x);
      o.iters = static_cast<int>(x);
    } else if (k == "--layers") {
      num(&o.layers);
    } else if (k == "--kv-heads") {
      num(&o.kv_heads);
    } else if (k == "--head-dim") {
      num(&o.head_dim);
    } else if (k == "--block-tokens") {
      num(&o.block_tokens);
    } else if (k == "--elem-bytes") {
      num(&o.elem_bytes);
    } else {
      Die(k, "unknown flag");
    }
  }
  if (argc % 2 == 0) Die(argv[argc - 1], "flag without a value");
  return o;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  const strata::Options o = strata::Parse(argc, argv);
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) strata::Die("socketpair", strerror(errno));
  // Fork before any device runtime is loaded: each process makes its own context.
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    _exit(strata::RunDecode(o, fds[1]));
  }
  close(fds[1]);
  const int rc = strata::RunPrefill(o, fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return rc != 0 ? rc : (WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
