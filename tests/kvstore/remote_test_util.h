#pragma once
// Helpers shared by the G4 (remote tier) tests.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <memory>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "strata/kvstore/kvstore_server.h"
#include "strata/kvstore/remote_tier.h"

namespace strata::kvstore::testing {

// Deterministic block contents that differ for every (seed, offset).
inline std::vector<std::byte> MakeBlock(size_t bytes, uint64_t seed) {
  std::vector<std::byte> b(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<std::byte>(x);
  }
  return b;
}

// A unique transport agent name per client in this process.
inline std::string NextAgentName(const std::string& prefix) {
  static std::atomic<int> n{0};
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

inline RemoteTierOptions ClientOptions(std::vector<std::string> daemons, size_t block_bytes) {
  RemoteTierOptions o;
  o.daemons = std::move(daemons);
  o.block_bytes = block_bytes;
  o.agent_name = NextAgentName("kv-client");
  o.staging_bytes = 16 * block_bytes;
  o.lanes = 2;
  o.reconnect_interval = absl::Milliseconds(50);
  return o;
}

// A started daemon of `capacity_bytes` and blocks of `block_bytes` (0: the first client's)
// (nullptr, with a test failure, when it cannot start).
inline std::unique_ptr<KvStoreServer> StartTestServer(
    const std::string& id, int64_t capacity_bytes, size_t block_bytes,
    absl::Duration lease_timeout = absl::Seconds(30),
    absl::Duration release_delay = absl::ZeroDuration()) {
  KvStoreServerOptions o;
  o.release_delay_for_test = release_delay;
  o.id = id;
  o.capacity_bytes = capacity_bytes;
  o.block_bytes = block_bytes;
  o.lease_timeout = lease_timeout;
  auto s = KvStoreServer::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  EXPECT_TRUE((*s)->Start().ok());
  return std::move(*s);
}

// A remote tier over `daemons` with ClientOptions (nullptr, with a test failure, on error).
inline std::unique_ptr<RemoteTier> ConnectTestTier(std::vector<std::string> daemons,
                                                   size_t block_bytes) {
  auto t = RemoteTier::Create(ClientOptions(std::move(daemons), block_bytes));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// GET http://127.0.0.1:port/path over a plain socket; "" on failure. Body only.
inline std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return "";
  }
  std::string resp;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, size_t(n));
  ::close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// Polls `cond` every 20 ms until it holds or `timeout` passes.
template <typename Cond>
bool WaitFor(Cond cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cond();
}

}  // namespace strata::kvstore::testing
