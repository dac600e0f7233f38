// Peer process for two_process_test: a decode-side agent in its own process.
//
// Usage: transport_peer <socket fd> <region bytes> <register|allocate|stage-writer>
// Protocol over the inherited socket (length-prefixed frames, see test_util.h):
//   register / allocate (a receiving peer):
//     peer -> test: Metadata(), ExportRegion(region)
//     then for every notification "hash <offset> <length>" received from the test's agent:
//     peer -> test: "<sender> <fnv1a of region[offset, offset+length)>"
//   stage-writer (a writing peer on the staged device path, device memory simulated):
//     test -> peer: the test agent's Metadata(), its device region's ExportRegion()
//     peer -> test: "posted" once a write of the whole region (pieces of 64 KiB) is posted
//   stage-receiver (a receiving peer on the staged device path, copying each piece in slowly):
//     peer -> test: Metadata(), ExportRegion(device region)
//   device-receiver (a receiving peer whose device region the test maps: the ipc path):
//     peer -> test: Metadata(), ExportRegion(device region)
// Exits when the socket closes (or it is killed, which is the point of the test).
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shm_device_memory.h"
#include "strata/transport/agent.h"
#include "test_util.h"

namespace {

using strata::transport::Agent;
using namespace strata::transport::testing;

bool SocketClosed(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLIN));
}

int Run(int fd, size_t region_bytes, bool allocate) {
  auto agent = Agent::Create({.name = "peer"});
  if (!agent.ok()) {
    fprintf(stderr, "transport_peer: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  // The region is either the process's own memory or memory UCX allocated (shared memory).
  std::vector<char> owned;
  std::span<char> region;
  uint64_t id = 0;
  if (allocate) {
    auto a = (*agent)->AllocateMemory(region_bytes);
    if (!a.ok()) return 2;
    region = std::span<char>(static_cast<char*>(a->addr), region_bytes);
    id = a->region;
  } else {
    owned.assign(region_bytes, 0);
    region = std::span<char>(owned);
    auto r = (*agent)->RegisterMemory(owned.data(), owned.size());
    if (!r.ok()) return 2;
    id = *r;
  }
  auto blob = (*agent)->ExportRegion(id);
  if (!blob.ok() || !SendFrame(fd, (*agent)->Metadata()) || !SendFrame(fd, *blob)) return 3;
  while (!SocketClosed(fd)) {
    for (auto& [sender, message] : (*agent)->TakeNotifications()) {
      std::istringstream in(message);
      std::string verb;
      size_t offset = 0, length = 0;
      in >> verb >> offset >> length;
      if (verb != "hash" || offset + length > region.size()) return 4;
      const uint64_t h = Fnv1a(region.data() + offset, length);
      if (!SendFrame(fd, sender + " " + std::to_string(h))) return 5;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

// Writes its whole "device" region into the test's device region on the staged path, then
// waits to be killed with the write in flight.
int RunStageWriter(int fd, size_t region_bytes) {
  ShmDeviceMemory device;
  auto agent = Agent::Create(StagedOptions("peer", &device, 64 << 10));
  if (!agent.ok()) return 1;
  char* pool = static_cast<char*>(device.Allocate(region_bytes));
  if (pool == nullptr) return 2;
  for (size_t i = 0; i < region_bytes; ++i) pool[i] = PatternByte(9, i);
  auto local = (*agent)->RegisterMemory(pool, region_bytes, strata::transport::MemoryKind::kDevice);
  auto meta = RecvFrame(fd);
  auto blob = RecvFrame(fd);
  if (!local.ok() || !meta || !blob || !(*agent)->AddPeer("test", *meta).ok()) return 3;
  auto remote = (*agent)->ImportRegion("test", *blob);
  if (!remote.ok()) return 4;
  const strata::transport::Run all{0, 0, region_bytes};
  auto t = (*agent)->PostWrite("test", *local, *remote, std::span(&all, 1), "never");
  if (!t.ok() || !SendFrame(fd, "posted")) return 5;
  while (!SocketClosed(fd)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return 0;
}

// Takes writes into its "device" region until killed: staged, 20 ms per piece, or mapped by the
// writer (ipc).
int RunDeviceReceiver(int fd, size_t region_bytes, bool staged) {
  ShmDeviceMemory device;
  device.copy_delay_ms = 20;
  strata::transport::AgentOptions o = StagedOptions("peer", &device, 64 << 10);
  if (!staged) o.device_path = strata::transport::AgentOptions::DevicePath::kAuto;
  auto agent = Agent::Create(o);
  if (!agent.ok()) return 1;
  void* pool = device.Allocate(region_bytes);
  if (pool == nullptr) return 2;
  auto region = (*agent)->RegisterMemory(pool, region_bytes, strata::transport::MemoryKind::kDevice);
  if (!region.ok()) return 3;
  auto blob = (*agent)->ExportRegion(*region);
  if (!blob.ok() || !SendFrame(fd, (*agent)->Metadata()) || !SendFrame(fd, *blob)) return 4;
  while (!SocketClosed(fd)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr,
            "usage: transport_peer <socket fd> <region bytes> "
            "<register|allocate|stage-writer|stage-receiver|device-receiver>\n");
    return 64;
  }
  const std::string mode = argv[3];
  if (mode == "stage-writer") return RunStageWriter(atoi(argv[1]), static_cast<size_t>(atoll(argv[2])));
  if (mode == "stage-receiver" || mode == "device-receiver") {
    return RunDeviceReceiver(atoi(argv[1]), static_cast<size_t>(atoll(argv[2])),
                             mode == "stage-receiver");
  }
  return Run(atoi(argv[1]), static_cast<size_t>(atoll(argv[2])), mode == "allocate");
}
