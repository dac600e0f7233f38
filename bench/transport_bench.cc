// Put bandwidth of strata::transport between two processes on this host, per run size.
//
// The process forks before any UCX state exists: the child is the target (registers a buffer,
// sends Metadata() + ExportRegion() over a socketpair, then idles while its progress thread
// serves the transfers); the parent is the initiator and times PostWrite + Wait.
//
// Each transfer carries k runs of `size` bytes (k * size ~= 16 MiB, at least one run), i.e.
// k ucp_put_nbx calls and one endpoint flush, like one request's KV blocks moving at once.
// Two layouts are timed per size:
//   same      every run reads offset 0 and writes offset 0: the same memory footprint as
//             `ucx_perftest -t ucp_put_bw -s size` (one buffer of `size` bytes, reused);
//   distinct  run i reads/writes its own block (i * size mod 64 MiB): KV blocks of a pool.
// Output: one line per size, "size_bytes same_MBps distinct_MBps" (MB = 2^20 bytes, as
// ucx_perftest reports), after a human-readable header on stderr. UCX_TLS is honoured as set.
//
// Usage: transport_bench [min_size] [max_size] [seconds_per_point]
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "strata/transport/agent.h"

namespace {

using strata::transport::Agent;
using strata::transport::Run;
using Clock = std::chrono::steady_clock;

constexpr size_t kPoolBytes = 64u << 20;
constexpr size_t kBytesPerTransfer = 16u << 20;

bool SendFrame(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  return write(fd, &n, 4) == 4 && write(fd, s.data(), n) == static_cast<ssize_t>(n);
}

std::optional<std::string> RecvFrame(int fd) {
  uint32_t n = 0;
  if (recv(fd, &n, 4, MSG_WAITALL) != 4) return std::nullopt;
  std::string s(n, '\0');
  if (n > 0 && recv(fd, s.data(), n, MSG_WAITALL) != static_cast<ssize_t>(n)) return std::nullopt;
  return s;
}

[[noreturn]] void Die(const char* what, const std::string& why) {
  fprintf(stderr, "transport_bench: %s: %s\n", what, why.c_str());
  exit(1);
}

int Target(int fd) {
  auto agent = Agent::Create({.name = "bench-target"});
  if (!agent.ok()) Die("target agent", agent.status().ToString());
  // The target's pool comes from AllocateMemory, as a decode worker's KV pool should.
  auto region = (*agent)->AllocateMemory(kPoolBytes);
  if (!region.ok()) Die("target allocate", region.status().ToString());
  memset(region->addr, 1, region->length);
  auto blob = (*agent)->ExportRegion(region->region);
  if (!blob.ok() || !SendFrame(fd, (*agent)->Metadata()) || !SendFrame(fd, *blob)) {
    Die("target", "cannot send metadata");
  }
  char byte;
  while (read(fd, &byte, 1) > 0) {  // until the initiator closes the socket
  }
  return 0;
}

struct Setup {
  std::unique_ptr<Agent> agent;
  uint64_t local = 0, remote = 0;
};

// Times transfers of k runs of `size` bytes for ~`seconds`; returns MB/s.
double Measure(Setup& s, size_t size, bool distinct, double seconds) {
  const size_t k = std::max<size_t>(1, kBytesPerTransfer / size);
  std::vector<Run> runs(k);
  for (size_t i = 0; i < k; ++i) {
    const uint64_t off = distinct ? (i * size) % kPoolBytes : 0;
    runs[i] = Run{off, off, size};
  }
  auto one = [&] {
    auto t = s.agent->PostWrite("target", s.local, s.remote, runs);
    if (!t.ok()) Die("PostWrite", t.status().ToString());
    absl::Status st = s.agent->Wait(*t, absl::Seconds(60));
    if (!st.ok()) Die("Wait", st.ToString());
    s.agent->Release(*t);
  };
  for (int i = 0; i < 3; ++i) one();  // warm-up (wireup, registration caches)
  uint64_t bytes = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    one();
    bytes += k * size;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return bytes / elapsed / (1u << 20);
}

int Initiator(int fd, size_t min_size, size_t max_size, double seconds) {
  Setup s;
  auto agent = Agent::Create({.name = "bench-initiator"});
  if (!agent.ok()) Die("initiator agent", agent.status().ToString());
  s.agent = std::move(*agent);
  std::vector<char> pool(kPoolBytes, 2);
  auto local = s.agent->RegisterMemory(pool.data(), pool.size());
  if (!local.ok()) Die("initiator register", local.status().ToString());
  s.local = *local;
  auto meta = RecvFrame(fd);
  auto blob = RecvFrame(fd);
  if (!meta || !blob) Die("initiator", "target did not start");
  if (absl::Status st = s.agent->AddPeer("target", *meta); !st.ok()) Die("AddPeer", st.ToString());
  auto remote = s.agent->ImportRegion("target", *blob);
  if (!remote.ok()) Die("ImportRegion", remote.status().ToString());
  s.remote = *remote;
  const char* tls = getenv("UCX_TLS");
  fprintf(stderr, "# strata transport put bandwidth, UCX_TLS=%s, MB/s (2^20 B/s)\n",
          tls ? tls : "(unset)");
  fprintf(stderr, "# size_bytes same_MBps distinct_MBps\n");
  for (size_t size = min_size; size <= max_size && size <= kPoolBytes; size *= 2) {
    const double same = Measure(s, size, false, seconds);
    const double distinct = Measure(s, size, true, seconds);
    printf("%zu %.1f %.1f\n", size, same, distinct);
    fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t min_size = argc > 1 ? strtoull(argv[1], nullptr, 0) : 64u << 10;
  const size_t max_size = argc > 2 ? strtoull(argv[2], nullptr, 0) : 64u << 20;
  const double seconds = argc > 3 ? atof(argv[3]) : 0.5;
  if (min_size == 0 || max_size < min_size) Die("usage", "transport_bench [min] [max] [sec]");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) Die("socketpair", strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) Die("fork", strerror(errno));
  if (pid == 0) {
    close(sv[0]);
    return Target(sv[1]);
  }
  close(sv[1]);
  const int rc = Initiator(sv[0], min_size, max_size, seconds);
  close(sv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return rc;
}
