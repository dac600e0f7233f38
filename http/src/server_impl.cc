#include "server_impl.h"

#include <pthread.h>
#include <signal.h>

#include <boost/asio/post.hpp>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "strata/common/logging.h"

namespace strata::http {

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  if (options.threads < 1) return absl::InvalidArgumentError("http: threads must be >= 1");
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError("http: max_connections must be >= 1");
  }
  if (options.max_connections_per_client < 1) {
    return absl::InvalidArgumentError("http: max_connections_per_client must be >= 1");
  }
  if (options.max_queued_write_bytes < 1) {
    return absl::InvalidArgumentError("http: max_queued_write_bytes must be >= 1");
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("http: bad port ", options.port));
  }
  std::unique_ptr<internal::TlsContext> tls;
  if (options.tls.enabled()) {
    auto loaded = internal::TlsContext::Load(options.tls);
    if (!loaded.ok()) return loaded.status();
    tls = *std::move(loaded);
  }
  return std::make_unique<internal::ServerImpl>(options, std::move(tls));
}

namespace internal {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// How long Shutdown waits for connections to run their close after being told to; only an I/O
// thread stuck in a blocking handler makes this matter.
constexpr absl::Duration kCloseWait = absl::Seconds(5);

}  // namespace

ServerImpl::ServerImpl(const ServerOptions& options, std::unique_ptr<TlsContext> tls)
    : options_(options),
      tls_(std::move(tls)),
      accept_strand_(asio::make_strand(io_context_)),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {}

ServerImpl::~ServerImpl() { Shutdown(absl::ZeroDuration()); }

void ServerImpl::Route(std::string method, std::string path, Handler handler) {
  {
    absl::MutexLock lock(&state_mu_);
    if (state_ != State::kNew) {
      STRATA_LOG(Error) << "http: Route(" << method << " " << path << ") after Start ignored";
      return;
    }
  }
  routes_[std::move(path)][std::move(method)] = std::move(handler);
}

absl::Status ServerImpl::Start() {
  absl::MutexLock lock(&state_mu_);
  if (state_ != State::kNew) return absl::FailedPreconditionError("http: Start called twice");
  if (absl::Status status = Listen(); !status.ok()) return status;
  work_.emplace(io_context_.get_executor());
  asio::post(accept_strand_, [this] { Accept(); });
  threads_.reserve(options_.threads);
  running_threads_ = options_.threads;
  for (int i = 0; i < options_.threads; ++i) {
    threads_.emplace_back([this] {
      // OpenSSL writes TLS records to the socket with write(2): a peer that has gone away must
      // give EPIPE on this thread, not a SIGPIPE that ends the process.
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
      io_context_.run();
      absl::MutexLock lock(&threads_mu_);
      --running_threads_;
    });
  }
  state_ = State::kRunning;
  if (tls_ != nullptr) {
    STRATA_LOG(Info) << "http: " << options_.host << ":" << port_.load() << " serves "
                     << tls_->description();
  }
  return absl::OkStatus();
}

absl::Status ServerImpl::Listen() {
  boost::system::error_code ec;
  tcp::resolver resolver(io_context_);
  const auto endpoints =
      resolver.resolve(options_.host, std::to_string(options_.port),
                       tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: cannot resolve ", options_.host, ": ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    return absl::UnavailableError(
        absl::StrCat("http: cannot listen on ", where, ": ", ec.message()));
  }
  port_ = acceptor_.local_endpoint(ec).port();
  return absl::OkStatus();
}

void ServerImpl::Accept() {
  // Each connection gets its own strand: its handlers never run concurrently.
  acceptor_.async_accept(asio::any_io_executor(asio::make_strand(io_context_)),
                         [this](const boost::system::error_code& ec, tcp::socket socket) {
                           OnAccept(ec, std::move(socket));
                         });
}

void ServerImpl::OnAccept(const boost::system::error_code& ec, tcp::socket socket) {
  if (!acceptor_.is_open() || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Typically out of file descriptors: back off instead of spinning.
    STRATA_LOG(Warning) << "http: accept failed: " << ec.message();
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([this](const boost::system::error_code& wait_ec) {
      if (!wait_ec) Accept();
    });
    return;
  }
  boost::system::error_code ignored;
  const tcp::endpoint peer = socket.remote_endpoint(ignored);
  const std::string client = ignored ? std::string() : peer.address().to_string();
  bool admitted = false;
  std::shared_ptr<Session> session;
  // The TLS context in use now (the files are re-read here when the check is due).
  const SslCtxPtr tls_context = tls_ != nullptr ? tls_->ForNewConnection() : nullptr;
  if (!draining_ && open_connections_.load() < options_.max_connections) {
    absl::MutexLock lock(&sessions_mu_);
    int& from_client = per_client_[client];
    if (from_client < options_.max_connections_per_client) {
      ++from_client;
      admitted = true;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE tokens must not wait for Nagle
      session = std::make_shared<Session>(std::move(socket), tls_context.get(), next_session_id_++,
                                          static_cast<SessionHost*>(this));
      sessions_[session->id()] = SessionEntry{session, client};
      ++open_connections_;
    } else if (from_client == 0) {
      per_client_.erase(client);
    }
  }
  if (admitted) {
    session->Start();
  } else {
    // Over a limit: closed at once, without a response (see docs/http.md).
    socket.close(ignored);
  }
  Accept();
}

void ServerImpl::OnSessionClosed(uint64_t id) {
  absl::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  auto client = per_client_.find(it->second.client);
  if (client != per_client_.end() && --client->second <= 0) per_client_.erase(client);
  sessions_.erase(it);
  --open_connections_;
}

void ServerImpl::Dispatch(const Request& request, std::shared_ptr<ResponseWriter> writer) {
  const auto path = routes_.find(request.path);
  if (path == routes_.end()) {
    RespondError(*writer, 404,
                 absl::StrCat("Invalid URL (", request.method, " ", request.path, ")"),
                 "invalid_request_error");
    return;
  }
  const auto route = path->second.find(request.method);
  if (route == path->second.end()) {
    std::vector<std::string> allowed;
    for (const auto& [method, handler] : path->second) allowed.push_back(method);
    writer->Respond(
        405, "application/json",
        ErrorJson(absl::StrCat("Invalid method for URL (", request.method, " ", request.path, ")"),
                  "invalid_request_error"),
        {{"Allow", absl::StrJoin(allowed, ", ")}});
    return;
  }
  // A throwing handler is a bug; if it threw before answering, dropping the writer sends 500.
  try {
    route->second(request, std::move(writer));
  } catch (const std::exception& e) {
    STRATA_LOG(Error) << "http: handler for " << request.path << " threw: " << e.what();
  } catch (...) {
    STRATA_LOG(Error) << "http: handler for " << request.path << " threw";
  }
}

std::vector<std::shared_ptr<Session>> ServerImpl::LiveSessions() {
  std::vector<std::shared_ptr<Session>> live;
  absl::MutexLock lock(&sessions_mu_);
  for (const auto& [id, entry] : sessions_) {
    if (auto session = entry.session.lock()) live.push_back(std::move(session));
  }
  return live;
}

void ServerImpl::AwaitNoSessions(absl::Duration timeout) {
  absl::MutexLock lock(&sessions_mu_);
  sessions_mu_.AwaitWithTimeout(
      absl::Condition(
          +[](absl::flat_hash_map<uint64_t, SessionEntry>* sessions) { return sessions->empty(); },
          &sessions_),
      timeout);
}

void ServerImpl::StopAccepting() {
  absl::Notification closed;
  asio::post(accept_strand_, [this, &closed] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    closed.Notify();
  });
  closed.WaitForNotificationWithTimeout(kCloseWait);
}

void ServerImpl::StopThreads() {
  // Let the I/O threads run out of work rather than stop them: handlers already queued (an
  // accept that raced with the acceptor's close, a session's last completions) still run and
  // close their sockets. Stop outright only if a handler is stuck.
  work_.reset();
  {
    absl::MutexLock lock(&threads_mu_);
    auto stopped = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(threads_mu_) { return running_threads_ == 0; };
    if (!threads_mu_.AwaitWithTimeout(absl::Condition(&stopped), kCloseWait)) {
      STRATA_LOG(Warning) << "http: I/O threads still busy at shutdown; stopping them";
      io_context_.stop();
    }
  }
  for (std::thread& thread : threads_) thread.join();
}

void ServerImpl::Shutdown(absl::Duration drain) {
  absl::MutexLock lock(&state_mu_);
  if (state_ == State::kStopped) return;
  const bool running = state_ == State::kRunning;
  state_ = State::kStopped;
  draining_ = true;
  if (!running) return;
  for (const std::thread& thread : threads_) {
    STRATA_CHECK(thread.get_id() != std::this_thread::get_id())
        << "http: Shutdown called from an I/O thread (a handler)";
  }
  StopAccepting();
  for (const auto& session : LiveSessions()) session->BeginDrain();
  AwaitNoSessions(drain);
  for (const auto& session : LiveSessions()) session->ForceClose();
  AwaitNoSessions(kCloseWait);
  StopThreads();
  threads_.clear();
  // Only if an I/O thread was stuck: close the rest here, now that no strand can run.
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  for (const auto& session : LiveSessions()) session->CloseAfterStop();
}

}  // namespace internal
}  // namespace strata::http
