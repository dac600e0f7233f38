#pragma once
// `strata up --routers N`'s front: one TCP port that spreads client connections over N router
// HTTP ports, byte for byte (no HTTP parsing), so a router's death costs only the connections it
// held: new connections go to the routers that accept them.
//
// Each new connection goes to the next backend in turn; a backend that refuses (or does not
// answer the connect within a second) is skipped for `down_for`, and the connection tries the
// next one, so a client is refused only when no router accepts. A connection whose backend
// closes or fails is closed towards the client (its request was cut; the client retries, and
// its retry finds a live router). Each direction buffers at most `buffer_bytes`: a side that does
// not read stops the other side's reads, so a slow client holds no unbounded memory.
//
// One thread, epoll, non-blocking sockets. Thread-safety: Start/Stop from one thread; stats()
// from any.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace strata::cli {

struct TcpFrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;                       // 0: any free port
  std::vector<std::string> backends;  // "host:port" (IPv4 or a name that resolves to IPv4)
  size_t buffer_bytes = 256 << 10;    // per direction per connection
  int max_connections = 16384;        // client connections beyond this are closed at once
  absl::Duration down_for = absl::Seconds(1);
  absl::Duration connect_timeout = absl::Seconds(1);
};

class TcpFront {
 public:
  explicit TcpFront(TcpFrontOptions options);
  ~TcpFront();  // Stop()
  TcpFront(const TcpFront&) = delete;
  TcpFront& operator=(const TcpFront&) = delete;

  // Binds and listens (kUnavailable with the reason if it cannot), then serves on its thread.
  absl::Status Start();
  // Closes the listener and every connection. Idempotent.
  void Stop();
  int port() const { return port_; }

  struct Stats {
    int64_t accepted = 0;        // client connections taken
    int64_t refused = 0;         // closed because no backend accepted (or over the cap)
    int64_t backend_retries = 0; // connects that failed and were tried on another backend
    int64_t open = 0;            // connections open now
  };
  Stats stats() const;

 private:
  struct Conn;
  void Run();

  TcpFrontOptions options_;
  int port_ = 0;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop() wakes the loop
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::atomic<int64_t> accepted_{0}, refused_{0}, retries_{0}, open_{0};
};

}  // namespace strata::cli
