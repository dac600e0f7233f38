// G4 across processes: `strata kvstore` daemons run as real child processes (fork + exec of
// the built binary); the client tier lives in this test process. Covers the round trip, a
// daemon SIGKILLed mid-use (clean Unavailable, then recovery after a restart on the same port),
// clean shutdown on SIGTERM, and the CLI's usage errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "remote_test_util.h"
#include "strata/kvstore/remote_tier.h"

namespace strata::kvstore {
namespace {

using testing::ClientOptions;
using testing::MakeBlock;

constexpr size_t kBlock = 256 << 10;
const char kStrata[] = STRATA_BINARY_DIR "/bin/strata";

// A child process with its stdout (and stderr) on a pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;

  Child() = default;
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)), out(std::exchange(o.out, -1)) {}
  Child& operator=(Child&& o) noexcept {
    std::swap(pid, o.pid);
    std::swap(out, o.out);
    return *this;
  }

  // `guard`: the child runs with at most 64 GiB of address space and 1 GiB files, so that a
  // pool it should refuse cannot fill the machine's memory or its /dev/shm if it does not.
  static Child Spawn(const std::vector<std::string>& args, bool guard = false) {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    Child c;
    c.pid = ::fork();
    if (c.pid == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      if (guard) {
        const rlimit as{.rlim_cur = rlim_t{64} << 30, .rlim_max = rlim_t{64} << 30};
        const rlimit fsize{.rlim_cur = rlim_t{1} << 30, .rlim_max = rlim_t{1} << 30};
        if (::setrlimit(RLIMIT_AS, &as) != 0 || ::setrlimit(RLIMIT_FSIZE, &fsize) != 0)
          ::_exit(126);
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(kStrata));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(kStrata, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    c.out = fds[0];
    return c;
  }
  // The next line of output, waiting up to `timeout`; "" at EOF or timeout.
  std::string ReadLine(absl::Duration timeout = absl::Seconds(20)) {
    std::string line;
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      pollfd p{.fd = out, .events = POLLIN, .revents = 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char ch;
      if (::read(out, &ch, 1) != 1) return line;
      if (ch == '\n') return line;
      line.push_back(ch);
    }
    return line;
  }
  // Exit status after `sig` (0: none sent), or -1 if it had to be killed.
  int Stop(int sig) {
    if (pid <= 0) return -1;
    if (sig != 0) ::kill(pid, sig);
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        pid = -1;
        return -1;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    pid = -1;
    ::close(out);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
  }
  ~Child() {
    if (pid > 0) Stop(SIGKILL);
  }
};

// Starts a daemon; returns its KvStore address (from its first line of output).
std::string StartDaemon(Child* c, const std::string& id, int port) {
  *c = Child::Spawn({"kvstore", "--id", id, "--port", std::to_string(port), "--http-port", "0",
                     "--capacity-bytes", std::to_string(32 * kBlock), "--block-bytes",
                     std::to_string(kBlock)});
  // Logs (stderr shares the pipe) may come first.
  const std::string marker = ": grpc ";
  std::string line;
  for (int i = 0; i < 50 && line.find(marker) == std::string::npos; ++i) {
    line = c->ReadLine();
    if (line.empty()) break;
  }
  const size_t at = line.find(marker);
  EXPECT_NE(at, std::string::npos) << line;
  if (at == std::string::npos) return "";
  const size_t end = line.find(',', at);
  return line.substr(at + marker.size(), end == std::string::npos ? end : end - at - marker.size());
}

int PortOf(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }

TEST(RemoteProcessTest, RoundTripKillAndRecover) {
  Child daemon;
  const std::string address = StartDaemon(&daemon, "kvs-proc", 0);
  ASSERT_FALSE(address.empty());
  auto tier = RemoteTier::Create(ClientOptions({address}, kBlock));
  ASSERT_TRUE(tier.ok()) << tier.status();
  RemoteTier& t = **tier;
  for (uint64_t h = 1; h <= 4; ++h) ASSERT_TRUE(t.Put({.hash = h}, MakeBlock(kBlock, h)).ok());
  std::vector<std::byte> out(kBlock);
  for (uint64_t h = 1; h <= 4; ++h) {
    ASSERT_TRUE(t.Get(h, out).ok());
    ASSERT_EQ(out, MakeBlock(kBlock, h));
  }

  // The daemon dies: every operation fails cleanly (no hang, no stale data) and is counted.
  ASSERT_EQ(daemon.Stop(SIGKILL), 128 + SIGKILL);
  const TierStats before = t.stats();
  const absl::Status get = t.Get(1, out);
  EXPECT_TRUE(absl::IsUnavailable(get)) << get;
  const absl::Status put = t.Put({.hash = 9}, MakeBlock(kBlock, 9));
  EXPECT_TRUE(absl::IsUnavailable(put)) << put;
  EXPECT_FALSE(t.Contains(1));
  EXPECT_EQ(t.stats().misses, before.misses + 1);
  EXPECT_EQ(t.stats().rejected, before.rejected + 1);
  EXPECT_EQ(t.connected_daemons(), 0);

  // It comes back (empty) on the same port: the tier reconnects by itself.
  Child again;
  ASSERT_EQ(StartDaemon(&again, "kvs-proc", PortOf(address)), address);
  ASSERT_TRUE(testing::WaitFor([&] { return t.Put({.hash = 9}, MakeBlock(kBlock, 9)).ok(); },
                               absl::Seconds(15)));
  EXPECT_EQ(t.connected_daemons(), 1);
  EXPECT_TRUE(absl::IsNotFound(t.Get(1, out))) << "a restarted daemon holds nothing";
  ASSERT_TRUE(t.Get(9, out).ok());
  EXPECT_EQ(out, MakeBlock(kBlock, 9));
  EXPECT_EQ(again.Stop(SIGTERM), 0);
}

TEST(RemoteProcessTest, SigtermStopsCleanly) {
  Child daemon;
  ASSERT_FALSE(StartDaemon(&daemon, "kvs-term", 0).empty());
  EXPECT_EQ(daemon.Stop(SIGTERM), 0);
}

TEST(RemoteProcessTest, BadFlagsExitTwoWithOneLine) {
  const std::vector<std::vector<std::string>> bad = {
      {"kvstore"},  // no capacity
      {"kvstore", "--capacity-bytes", "1000", "--policy", "mru"},
      {"kvstore", "--capacity-bytes", "1000", "--lease-timeout-ms", "0"},
      {"kvstore", "--capacity-bytes", "x"},
      {"kvstore", "--capacity-bytes", "1000", "--frobnicate"},
  };
  for (const auto& args : bad) {
    Child c = Child::Spawn(args);
    const std::string line = c.ReadLine(absl::Seconds(10));
    EXPECT_EQ(c.Stop(0), 2) << line;
    EXPECT_EQ(line.rfind("strata kvstore: ", 0), 0u) << line;
  }
}

// A pool larger than the machine's memory is refused at start with one line naming what there
// is, instead of the daemon being OOM-killed while faulting it in.
TEST(RemoteProcessTest, APoolLargerThanMemoryIsRefusedAtStart) {
  Child c = Child::Spawn({"kvstore", "--id", "kvs-huge", "--port", "0", "--http-port", "0",
                          "--capacity-bytes", std::to_string(int64_t{1} << 50)},
                         /*guard=*/true);
  std::string line;
  for (int i = 0; i < 50; ++i) {
    line = c.ReadLine();
    if (line.empty() || line.rfind("strata kvstore: ", 0) == 0) break;
  }
  EXPECT_EQ(c.Stop(0), 1) << line;
  EXPECT_EQ(line.rfind("strata kvstore: kvstore kvs-huge pool of 1048576.0 GiB does not fit in "
                       "memory: ",
                       0),
            0u)
      << line;
}

}  // namespace
}  // namespace strata::kvstore
