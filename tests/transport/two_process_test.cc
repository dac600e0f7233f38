// A real peer process (transport_peer): metadata over a socketpair, a write + notification
// verified by the peer, then the peer is SIGKILLed and transfers must fail with kUnavailable
// naming it, promptly and without hanging.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shm_device_memory.h"
#include "strata/transport/agent.h"
#include "test_util.h"

namespace strata::transport {
namespace {

using ::testing::HasSubstr;
using testing::Fnv1a;
using testing::PatternByte;
using testing::RecvFrame;

constexpr size_t kRegionBytes = 4u << 20;

struct PeerProcess {
  pid_t pid = -1;
  int fd = -1;
};

PeerProcess Spawn(const char* memory_mode) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: make the child's end inheritable and exec.
    int fd = dup(sv[1]);  // dup clears FD_CLOEXEC
    char fd_arg[16], bytes_arg[32];
    snprintf(fd_arg, sizeof(fd_arg), "%d", fd);
    snprintf(bytes_arg, sizeof(bytes_arg), "%zu", kRegionBytes);
    execl(TRANSPORT_PEER_BIN, TRANSPORT_PEER_BIN, fd_arg, bytes_arg, memory_mode,
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(sv[1]);
  return {pid, sv[0]};
}

// (UCX_TLS for both processes, "" = UCX's own choice; how the peer provides its region).
using Param = std::pair<const char*, const char*>;

class TwoProcessTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const char* tls = GetParam().first;
    if (*tls != '\0') setenv("UCX_TLS", tls, 1);
    peer_ = Spawn(GetParam().second);
    ASSERT_GT(peer_.pid, 0);
    auto agent = Agent::Create({.name = "prefill"});
    if (*tls != '\0') unsetenv("UCX_TLS");
    ASSERT_TRUE(agent.ok()) << agent.status();
    agent_ = std::move(*agent);
    src_.resize(kRegionBytes);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = PatternByte(7, i);
    auto local = agent_->RegisterMemory(src_.data(), src_.size());
    ASSERT_TRUE(local.ok());
    local_ = *local;
    auto meta = RecvFrame(peer_.fd);
    auto blob = RecvFrame(peer_.fd);
    ASSERT_TRUE(meta && blob) << "peer process did not start";
    ASSERT_TRUE(agent_->AddPeer("peer", *meta).ok());
    auto remote = agent_->ImportRegion("peer", *blob);
    ASSERT_TRUE(remote.ok()) << remote.status();
    remote_ = *remote;
  }

  void TearDown() override {
    agent_.reset();
    if (peer_.fd >= 0) close(peer_.fd);
    if (peer_.pid > 0) {
      kill(peer_.pid, SIGKILL);
      waitpid(peer_.pid, nullptr, 0);
    }
  }

  PeerProcess peer_;
  std::unique_ptr<Agent> agent_;
  std::vector<char> src_;
  uint64_t local_ = 0, remote_ = 0;
};

TEST_P(TwoProcessTest, WriteNotifyThenPeerKilled) {
  // 1. Two runs; the peer hashes the second one when the notification arrives.
  const std::vector<transport::Run> runs = {{0, 1u << 20, 1u << 20}, {12345, 2u << 20, 1500000}};
  auto t = agent_->PostWrite("peer", local_, remote_, runs, "hash 2097152 1500000");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(agent_->Wait(*t, absl::Seconds(10)).ok());
  agent_->Release(*t);
  auto reply = RecvFrame(peer_.fd);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(*reply, "prefill " + std::to_string(Fnv1a(src_.data() + 12345, 1500000)));

  // 2. Kill the peer; the next transfers must fail with kUnavailable naming it, never hang.
  ASSERT_EQ(kill(peer_.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(peer_.pid, nullptr, 0), peer_.pid);
  peer_.pid = -1;
  const absl::Time start = absl::Now();
  absl::Status failure;
  int attempts = 0;
  while (failure.ok() && absl::Now() - start < absl::Seconds(15)) {
    ++attempts;
    auto next = agent_->PostWrite("peer", local_, remote_, runs, "hash 0 1");
    if (!next.ok()) {
      failure = next.status();
      break;
    }
    failure = agent_->Wait(*next, absl::Seconds(5));
    agent_->Release(*next);
    if (failure.ok()) absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_THAT(failure.message(), HasSubstr("peer"));
  EXPECT_LT(took, absl::Seconds(10)) << "after " << attempts << " attempts";
  // Failure is sticky until the peer is re-added: posting fails at once.
  auto again = agent_->PostWrite("peer", local_, remote_, runs);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("'peer'"));
  EXPECT_GE(agent_->Stats().peer_failures, 1u);
}

// CPU time this thread has used.
absl::Duration ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

// A transfer that cannot finish while the peer is stopped (where the transport needs the peer's
// progress to complete it): Wait keeps its timeout, sleeps instead of polling (its thread uses
// a small fraction of the wait in CPU), and sees the transfer finish once the peer runs again.
TEST_P(TwoProcessTest, WaitSleepsOnStoppedPeerAndWakesOnCompletion) {
  ASSERT_EQ(kill(peer_.pid, SIGSTOP), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(peer_.pid, &wstatus, WUNTRACED), peer_.pid);
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  const std::vector<transport::Run> runs = {{0, 0, 1u << 20}};
  auto t = agent_->PostWrite("peer", local_, remote_, runs);
  ASSERT_TRUE(t.ok()) << t.status();
  auto state = agent_->Check(*t);
  ASSERT_TRUE(state.ok()) << state.status();
  if (*state == TransferState::kInProgress) {
    const absl::Duration cpu0 = ThreadCpu();
    const absl::Time start = absl::Now();
    const absl::Status s = agent_->Wait(*t, absl::Milliseconds(300));
    const absl::Duration waited = absl::Now() - start;
    const absl::Duration cpu = ThreadCpu() - cpu0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_GE(waited, absl::Milliseconds(300));
    // The old Wait (yield-polling between 1 ms sleeps) burned about a third of the wait.
    EXPECT_LT(cpu, absl::Milliseconds(30)) << "Wait used CPU while idle";
    EXPECT_GE(agent_->Stats().waits_blocked, 1u);
  }
  ASSERT_EQ(kill(peer_.pid, SIGCONT), 0);
  ASSERT_TRUE(agent_->Wait(*t, absl::Seconds(10)).ok());
  agent_->Release(*t);
  // The bytes are there: the peer hashes what it holds.
  auto note = agent_->PostWrite("peer", local_, remote_, {}, "hash 0 1048576");
  ASSERT_TRUE(note.ok()) << note.status();
  ASSERT_TRUE(agent_->Wait(*note, absl::Seconds(10)).ok());
  agent_->Release(*note);
  auto reply = RecvFrame(peer_.fd);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(*reply, "prefill " + std::to_string(Fnv1a(src_.data(), 1u << 20)));
}

INSTANTIATE_TEST_SUITE_P(Tls, TwoProcessTest,
                         ::testing::Values(Param{"", "register"}, Param{"", "allocate"},
                                           Param{"tcp", "register"}),
                         [](const auto& info) {
                           return std::string(*info.param.first ? info.param.first : "default") +
                                  "_" + info.param.second;
                         });

// Reads a peer process's Metadata() and ExportRegion() from `fd`, adds the peer as "peer" and
// imports its region.
absl::StatusOr<uint64_t> ImportFromPeer(Agent& agent, int fd) {
  auto meta = RecvFrame(fd);
  auto blob = RecvFrame(fd);
  if (!meta || !blob) return absl::UnavailableError("peer process did not start");
  if (absl::Status s = agent.AddPeer("peer", *meta); !s.ok()) return s;
  return agent.ImportRegion("peer", *blob);
}

// A writer process on the staged path is SIGKILLed with pieces in flight (the receiver copies
// slowly, so pieces wait for its slots): the receiver loses nothing it holds, announces nothing
// for the cut write, and takes a whole write from another writer afterwards (every receive
// slot came back).
class StagedPeerKilledTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StagedPeerKilledTest, TheReceiverRecoversEverySlot) {
  const char* tls = GetParam();
  if (*tls != '\0') setenv("UCX_TLS", tls, 1);
  testing::ShmDeviceMemory device;
  device.copy_delay_ms = 20;
  AgentOptions o = testing::StagedOptions("decode", &device, 64 << 10);
  auto receiver = Agent::Create(o);
  PeerProcess peer = Spawn("stage-writer");
  ASSERT_GT(peer.pid, 0);
  ASSERT_TRUE(receiver.ok()) << receiver.status();
  char* pool = static_cast<char*>(device.Allocate(kRegionBytes));
  auto region = (*receiver)->RegisterMemory(pool, kRegionBytes, MemoryKind::kDevice);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(testing::SendFrame(peer.fd, (*receiver)->Metadata()));
  ASSERT_TRUE(testing::SendFrame(peer.fd, *(*receiver)->ExportRegion(*region)));
  auto posted = RecvFrame(peer.fd);
  ASSERT_TRUE(posted.has_value()) << "peer process did not post its write";
  // Some pieces arrive (and wait for the slow copies), then the writer dies.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*receiver)->Stats().staged_pieces_received < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(kill(peer.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(peer.pid, nullptr, 0), peer.pid);
  close(peer.fd);
  const uint64_t got = (*receiver)->Stats().staged_pieces_received;
  EXPECT_LT(got, kRegionBytes / (64 << 10)) << "the whole write landed before the kill";
  device.copy_delay_ms = 0;
  // Every piece the dead writer had sent is applied or dropped: no receive slot stays taken.
  const absl::Time drained = absl::Now() + absl::Seconds(10);
  while ((*receiver)->Stats().staged_receive_slots_busy > 0 && absl::Now() < drained) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ((*receiver)->Stats().staged_receive_slots_busy, 0u);
  const uint64_t slots_before = (*receiver)->Stats().staged_receive_slots;

  // Another writer, in this process, gets a whole write through.
  testing::ShmDeviceMemory writer_device;
  o.name = "prefill-2";
  o.device = &writer_device;
  auto writer = Agent::Create(o);
  if (*tls != '\0') unsetenv("UCX_TLS");
  ASSERT_TRUE(writer.ok()) << writer.status();
  char* src = static_cast<char*>(writer_device.Allocate(kRegionBytes));
  for (size_t i = 0; i < kRegionBytes; ++i) src[i] = PatternByte(4, i);
  auto local = (*writer)->RegisterMemory(src, kRegionBytes, MemoryKind::kDevice);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_TRUE((*writer)->AddPeer("decode", (*receiver)->Metadata()).ok());
  auto remote = (*writer)->ImportRegion("decode", *(*receiver)->ExportRegion(*region));
  ASSERT_TRUE(remote.ok()) << remote.status();
  const transport::Run all{0, 0, kRegionBytes};
  auto t = (*writer)->PostWrite("decode", *local, *remote, std::span(&all, 1), "whole");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status s = (*writer)->Wait(*t, absl::Seconds(30));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(std::memcmp(src, pool, kRegionBytes), 0);
  std::vector<std::string> notes;
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (notes.empty() && absl::Now() < until) {
    for (auto& [from, note] : (*receiver)->TakeNotifications()) notes.push_back(note);
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_THAT(notes, ::testing::ElementsAre("whole"));  // never "never": the cut write
  // The new writer's pieces fit the slots the dead one left: the pool did not have to grow.
  EXPECT_EQ((*receiver)->Stats().staged_receive_slots, slots_before);
  EXPECT_EQ((*receiver)->Stats().staged_receive_slots_busy, 0u);
  writer->reset();
  receiver->reset();  // closes cleanly with nothing of the dead writer's left behind
}

// A receiver process on the staged path is SIGKILLed with pieces of a write in flight: the
// write fails naming the peer, promptly, and the writer's slots all come back (a whole write
// to a new receiver goes through them).
TEST_P(StagedPeerKilledTest, AKilledReceiverFailsTheWriteAndFreesTheWritersSlots) {
  const char* tls = GetParam();
  if (*tls != '\0') setenv("UCX_TLS", tls, 1);
  PeerProcess peer = Spawn("stage-receiver");
  testing::ShmDeviceMemory device;
  auto writer = Agent::Create(testing::StagedOptions("prefill", &device, 64 << 10));
  ASSERT_GT(peer.pid, 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  char* src = static_cast<char*>(device.Allocate(kRegionBytes));
  for (size_t i = 0; i < kRegionBytes; ++i) src[i] = PatternByte(6, i);
  auto local = (*writer)->RegisterMemory(src, kRegionBytes, MemoryKind::kDevice);
  ASSERT_TRUE(local.ok()) << local.status();
  auto remote = ImportFromPeer(**writer, peer.fd);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const transport::Run all{0, 0, kRegionBytes};  // 64 pieces, 20 ms each at the receiver
  auto t = (*writer)->PostWrite("peer", *local, *remote, std::span(&all, 1), "cut");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_EQ(kill(peer.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(peer.pid, nullptr, 0), peer.pid);
  close(peer.fd);
  const absl::Time start = absl::Now();
  absl::Status s = (*writer)->Wait(*t, absl::Seconds(15));
  (*writer)->Release(*t);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));

  // A new receiver process: the whole write goes through the writer's two slots again.
  PeerProcess again = Spawn("stage-receiver");
  ASSERT_GT(again.pid, 0);
  remote = ImportFromPeer(**writer, again.fd);
  ASSERT_TRUE(remote.ok()) << remote.status();
  const transport::Run some{0, 0, 8 * (64 << 10)};  // 8 pieces
  t = (*writer)->PostWrite("peer", *local, *remote, std::span(&some, 1), "whole");
  ASSERT_TRUE(t.ok()) << t.status();
  s = (*writer)->Wait(*t, absl::Seconds(15));
  EXPECT_TRUE(s.ok()) << s;
  writer->reset();
  close(again.fd);
  kill(again.pid, SIGKILL);
  waitpid(again.pid, nullptr, 0);
  if (*tls != '\0') unsetenv("UCX_TLS");
}

// A receiver process whose device pool this process maps (the ipc path) is SIGKILLed: once UCX
// reports the peer failed, its pool is unmapped here (no device memory kept for a dead peer).
TEST_P(StagedPeerKilledTest, AKilledPeersMappedPoolIsClosed) {
  const char* tls = GetParam();
  if (*tls != '\0') setenv("UCX_TLS", tls, 1);
  PeerProcess peer = Spawn("device-receiver");
  testing::ShmDeviceMemory device;
  auto writer = Agent::Create({.name = "prefill", .device = &device});
  if (*tls != '\0') unsetenv("UCX_TLS");
  ASSERT_GT(peer.pid, 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  char* src = static_cast<char*>(device.Allocate(kRegionBytes));
  auto local = (*writer)->RegisterMemory(src, kRegionBytes, MemoryKind::kDevice);
  ASSERT_TRUE(local.ok()) << local.status();
  auto remote = ImportFromPeer(**writer, peer.fd);
  ASSERT_TRUE(remote.ok()) << remote.status();
  ASSERT_EQ(*(*writer)->RegionPath(*remote), "ipc");
  const transport::Run some{0, 0, 1 << 20};
  auto t = (*writer)->PostWrite("peer", *local, *remote, std::span(&some, 1), "done");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE((*writer)->Wait(*t, absl::Seconds(10)).ok());
  (*writer)->Release(*t);
  EXPECT_EQ(device.opens.load(), 1);
  EXPECT_EQ(device.closes.load(), 0);
  ASSERT_EQ(kill(peer.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(peer.pid, nullptr, 0), peer.pid);
  close(peer.fd);
  // Keepalive notices within a few seconds (the agent probes every second).
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (device.closes.load() == 0 && absl::Now() < deadline) {
    (void)(*writer)->Check(0);  // progresses the worker, as any caller's next call would
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(device.closes.load(), 1);
  EXPECT_GE((*writer)->Stats().peer_failures, 1u);
  EXPECT_EQ((*writer)->RegionPath(*remote).status().code(), absl::StatusCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Tls, StagedPeerKilledTest, ::testing::Values("", "tcp"),
                         [](const auto& info) {
                           return std::string(*info.param ? info.param : "default");
                         });

}  // namespace
}  // namespace strata::transport
