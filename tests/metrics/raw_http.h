#pragma once
// Test-only HTTP over raw sockets, so the metrics tests depend on nothing but the registry:
// a one-thread server that answers every GET with a body from a callback, and a blocking GET.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace strata::metrics::testing {

// Serves on 127.0.0.1:<ephemeral port>; each connection gets one response, then is closed.
class RawHttpServer {
 public:
  explicit RawHttpServer(std::function<std::string()> body);
  ~RawHttpServer();  // stops and joins the thread
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  void Loop();
  std::function<std::string()> body_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

// GET http://127.0.0.1:port/target (HTTP/1.0, so the reply is never chunked); returns the status code (-1 on connection failure) and
// stores the body. Times out after `timeout_ms` per socket operation.
int HttpGet(int port, const std::string& target, std::string* body, int timeout_ms = 2000);

// A port that was free a moment ago (bound to 0, read back, closed).
int PickFreePort();

}  // namespace strata::metrics::testing
