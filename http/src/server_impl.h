#pragma once
// The Server implementation: the io_context and its threads, the acceptor, the route table and
// the registry of open connections.
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "session.h"
#include "strata/http/server.h"
#include "tls_context.h"

namespace strata::http::internal {

class ServerImpl final : public Server, private SessionHost {
 public:
  // `tls`: null for plaintext.
  ServerImpl(const ServerOptions& options, std::unique_ptr<TlsContext> tls);
  ~ServerImpl() override;

  void Route(std::string method, std::string path, Handler handler) override;
  absl::Status Start() override;
  int port() const override { return port_.load(); }
  void Shutdown(absl::Duration drain) override;
  int64_t open_connections() const override { return open_connections_.load(); }
  std::string tls_description() const override { return tls_ ? tls_->description() : ""; }

 private:
  enum class State { kNew, kRunning, kStopped };

  // SessionHost.
  const ServerOptions& options() const override { return options_; }
  bool draining() const override { return draining_.load(); }
  void Dispatch(const Request& request, std::shared_ptr<ResponseWriter> writer) override;
  void OnSessionClosed(uint64_t id) override;

  absl::Status Listen();
  void Accept();  // on the accept strand
  void OnAccept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);
  void StopAccepting();
  void StopThreads();
  std::vector<std::shared_ptr<Session>> LiveSessions();
  // Waits up to `timeout` for every connection to close.
  void AwaitNoSessions(absl::Duration timeout);

  // First member: destroyed last, after every object whose handlers it still queues.
  boost::asio::io_context io_context_;
  const ServerOptions options_;
  const std::unique_ptr<TlsContext> tls_;
  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;  // after an accept error such as EMFILE
  uint64_t next_session_id_ = 0;            // on the accept strand
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  absl::Mutex threads_mu_;
  int running_threads_ ABSL_GUARDED_BY(threads_mu_) = 0;

  // path -> method -> handler; written only before Start(), then read-only.
  absl::flat_hash_map<std::string, std::map<std::string, Handler>> routes_;

  absl::Mutex state_mu_;  // serializes Start and Shutdown
  State state_ ABSL_GUARDED_BY(state_mu_) = State::kNew;
  std::atomic<bool> draining_{false};
  std::atomic<int> port_{0};
  std::atomic<int64_t> open_connections_{0};

  absl::Mutex sessions_mu_;
  struct SessionEntry {
    std::weak_ptr<Session> session;
    std::string client;  // the peer's address
  };
  absl::flat_hash_map<uint64_t, SessionEntry> sessions_ ABSL_GUARDED_BY(sessions_mu_);
  // Open connections per client address.
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(sessions_mu_);
};

}  // namespace strata::http::internal
