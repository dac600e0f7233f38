// Peer process for two_process_test: a decode-side agent in its own process.
//
// Usage: transport_peer <socket fd> <region bytes> <register|allocate>
// Protocol over the inherited socket (length-prefixed frames, see test_util.h):
//   peer -> test: Metadata(), ExportRegion(region)
//   then for every notification "hash <offset> <length>" received from the test's agent:
//   peer -> test: "<sender> <fnv1a of region[offset, offset+length)>"
// Exits when the socket closes (or it is killed, which is the point of the test).
#include <poll.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: transport_peer <socket fd> <region bytes> <register|allocate>\n");
    return 64;
  }
  return Run(atoi(argv[1]), static_cast<size_t>(atoll(argv[2])),
             std::string(argv[3]) == "allocate");
}
