#include "session.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "strata/common/logging.h"
#include "wire.h"

namespace strata::http::internal {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kHeaderLimit = 64 << 10;
constexpr size_t kWatchReadSize = 4096;
// How long a closing connection waits for the client's EOF after our last byte, so unread
// request bytes do not turn our close into a reset that destroys the response in flight.
constexpr absl::Duration kLingerTimeout = absl::Seconds(1);

std::string Str(beast::string_view s) { return std::string(s.data(), s.size()); }
absl::string_view Absl(beast::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string RemoteString(const tcp::socket& socket) {
  beast::error_code ec;
  const tcp::endpoint endpoint = socket.remote_endpoint(ec);
  if (ec) return "";
  const auto address = endpoint.address();
  if (address.is_v6()) return absl::StrCat("[", address.to_string(), "]:", endpoint.port());
  return absl::StrCat(address.to_string(), ":", endpoint.port());
}

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

}  // namespace

Request ToRequest(bhttp::request<bhttp::string_body>&& message, std::string remote) {
  Request request;
  request.method = Str(message.method_string());
  request.target = Str(message.target());
  request.path = request.target.substr(0, request.target.find('?'));
  for (const auto& field : message) {
    std::string name = absl::AsciiStrToLower(Absl(field.name_string()));
    auto [it, inserted] = request.headers.emplace(std::move(name), Str(field.value()));
    if (!inserted) absl::StrAppend(&it->second, ", ", Absl(field.value()));
  }
  request.body = std::move(message.body());
  request.remote = std::move(remote);
  return request;
}

Session::Session(tcp::socket socket, SSL_CTX* tls_context, uint64_t id, SessionHost* host)
    : id_(id),
      host_(host),
      executor_(socket.get_executor()),
      stream_(tls_context != nullptr ? Stream(std::move(socket), tls_context)
                                     : Stream(std::move(socket))),
      timer_(executor_),
      remote_(RemoteString(stream_.socket())),
      write_timer_(executor_) {}

void Session::Start() {
  asio::post(executor_, [self = shared_from_this()] {
    if (!self->stream_.tls()) {
      self->ArmTimer(self->host_->options().idle_timeout);
      return self->ReadRequest();
    }
    // A client that does not finish the handshake in time is closed by the timer.
    self->ArmTimer(self->host_->options().tls.handshake_timeout);
    self->stream_.async_handshake(
        [self](const boost::system::error_code& ec, size_t) { self->OnHandshake(ec); });
  });
}

// ---- TLS handshake -------------------------------------------------------------------------

void Session::OnHandshake(const boost::system::error_code& ec) {
  if (closed_) return;
  if (ec) {
    if (stream_.plaintext_http_seen()) return RejectPlaintext();
    STRATA_LOG(Debug) << "http: TLS handshake with " << remote_ << " failed: "
                      << (stream_.tls_error().empty() ? ec.message() : stream_.tls_error());
    return Close();
  }
  probes_only_ = !host_->options().tls.client_ca_file.empty() && !stream_.peer_certificate();
  ArmTimer(host_->options().idle_timeout);
  ReadRequest();
}

void Session::RejectPlaintext() {
  static const std::string kResponse = [] {
    const std::string body =
        ErrorJson("This port speaks HTTPS: the plain HTTP request was sent to an HTTPS port.",
                  "invalid_request_error");
    ResponseHead head;
    head.status = 400;
    head.content_type = "application/json";
    head.content_length = body.size();
    head.keep_alive = false;
    return FormatHead(head) + body;
  }();
  ArmTimer(kLingerTimeout);
  asio::async_write(stream_.socket(), asio::buffer(kResponse),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (self->closed_) return;
                      if (ec) return self->Close();
                      beast::error_code ignored;
                      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      self->DrainUntilClose();
                    });
}

void Session::DrainUntilClose() {
  stream_.socket().async_read_some(buffer_.prepare(kWatchReadSize),
                                   [self = shared_from_this()](beast::error_code ec, size_t) {
                                     if (self->closed_) return;
                                     if (ec) return self->Close();
                                     self->DrainUntilClose();  // nothing was committed
                                   });
}

void Session::BeginDrain() {
  asio::post(executor_, [self = shared_from_this()] {
    if (self->current_ == nullptr) self->Close();
  });
}

void Session::ForceClose() {
  asio::post(executor_, [self = shared_from_this()] { self->Close(); });
}

void Session::PostFlush(std::shared_ptr<Exchange> exchange) {
  asio::post(executor_, [self = shared_from_this(), exchange = std::move(exchange)] {
    self->Flush(exchange);
  });
}

// ---- Reading requests -------------------------------------------------------------------

void Session::ReadRequest() {
  if (closed_) return;
  if (host_->draining()) return Close();
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(host_->options().max_body_bytes);
  reading_ = true;
  bhttp::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Session::OnHeader(const beast::error_code& ec) {
  reading_ = false;
  if (closed_) return;
  if (ec) return OnReadError(ec);
  if (parser_->is_done()) return Dispatch();
  // curl and others wait (about a second) for this before sending a large body.
  if (absl::EqualsIgnoreCase(Absl(parser_->get()[bhttp::field::expect]), "100-continue")) {
    asio::async_write(stream_, asio::buffer(kContinue),
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->Close();
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  reading_ = true;
  bhttp::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void Session::OnBody(const beast::error_code& ec) {
  reading_ = false;
  if (closed_) return;
  if (ec) return OnReadError(ec);
  Dispatch();
}

void Session::OnReadError(const beast::error_code& ec) {
  parser_.reset();
  if (ec == bhttp::error::body_limit) {
    return SendError(413, absl::StrCat("The request body exceeds the limit of ",
                                       host_->options().max_body_bytes, " bytes."));
  }
  if (ec == bhttp::error::header_limit) {
    return SendError(431, "The request header fields are too large.");
  }
  if (IsParseError(ec)) return SendError(400, "Malformed HTTP request: " + ec.message());
  Close();  // EOF, reset, or the idle timer closed the socket
}

std::shared_ptr<ResponseWriter> Session::BeginExchange(bool keep_alive, bool http11) {
  DisarmTimer();  // no timeout while a response is in flight
  current_ = std::make_shared<Exchange>(shared_from_this(), keep_alive, http11);
  response_complete_ = false;
  abort_after_write_ = false;
  return std::make_shared<WriterHandle>(current_);
}

void Session::Dispatch() {
  bhttp::request<bhttp::string_body> message = parser_->release();
  parser_.reset();
  auto writer = BeginExchange(message.keep_alive(), message.version() >= 11);
  const Request request = ToRequest(std::move(message), remote_);
  StartWatch();
  if (probes_only_ && !absl::c_linear_search(host_->options().tls.probe_paths, request.path)) {
    RespondError(*writer, 403, "This server requires a TLS client certificate.",
                 "permission_error");
    return;
  }
  host_->Dispatch(request, std::move(writer));
}

void Session::SendError(int status, std::string message) {
  // The rest of the request is unread: answer, then close (lingering, see Linger()).
  auto writer = BeginExchange(/*keep_alive=*/false, /*http11=*/true);
  RespondError(*writer, status, message, "invalid_request_error");
}

// ---- Watching the socket while a response is in flight ------------------------------------

// The watch read runs only while nothing is buffered: once a client has sent bytes ahead
// (pipelining) they wait for the next request read, and that client's disconnect is noticed
// only when a write fails. This keeps the invariant that a watch read still pending when the
// response ends has buffered nothing, so waiting for it cannot strand a buffered request.
void Session::StartWatch() {
  if (reading_ || closed_) return;
  if (buffer_.size() > 0) return;
  reading_ = true;
  stream_.async_read_some(buffer_.prepare(kWatchReadSize),
                          [self = shared_from_this()](beast::error_code ec, size_t bytes) {
                            self->OnWatch(ec, bytes);
                          });
}

void Session::OnWatch(const beast::error_code& ec, size_t bytes) {
  reading_ = false;
  if (closed_) return;
  // EOF or an error: the client is gone (a half-close counts as gone, as in most servers).
  if (ec) return Close();
  buffer_.commit(bytes);
  if (lingering_) {
    buffer_.consume(buffer_.size());
    return StartWatch();
  }
  if (current_ == nullptr) ReadRequest();  // the response ended while this read was pending
}

// ---- Writing responses ---------------------------------------------------------------------

void Session::Flush(const std::shared_ptr<Exchange>& exchange) {
  if (closed_ || exchange != current_) return;
  Exchange::Output output = exchange->TakeOutput();
  for (std::string& bytes : output.bytes) {
    if (bytes.empty()) continue;
    queued_bytes_ += bytes.size();
    write_queue_.push_back(std::move(bytes));
  }
  response_complete_ = output.complete;
  abort_after_write_ = output.abort;
  if (queued_bytes_ > host_->options().max_queued_write_bytes) {
    // The client reads slower than the response is produced: it is cut off rather than let the
    // queue grow without bound.
    STRATA_LOG(Warning) << "http: closing " << remote_ << ": " << queued_bytes_
                        << " bytes queued for a client that does not read them";
    return Close();
  }
  MaybeWrite();
}

void Session::MaybeWrite() {
  if (writing_ || closed_) return;
  if (write_queue_.empty()) {
    if (response_complete_) OnResponseDone();
    return;
  }
  in_flight_.swap(write_queue_);
  buffers_.clear();
  for (const std::string& bytes : in_flight_) buffers_.push_back(asio::buffer(bytes));
  writing_ = true;
  const absl::Duration timeout = host_->options().write_timeout;
  if (timeout > absl::ZeroDuration() && timeout < absl::Hours(24 * 365)) {
    write_timer_.expires_after(absl::ToChronoNanoseconds(timeout));
    write_timer_.async_wait(
        [self = shared_from_this(), generation = write_generation_](beast::error_code ec) {
          if (ec || generation != self->write_generation_ || self->closed_) return;
          STRATA_LOG(Warning) << "http: closing " << self->remote_
                              << ": a write made no progress for "
                              << absl::FormatDuration(self->host_->options().write_timeout);
          self->Close();
        });
  }
  asio::async_write(stream_, buffers_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnWrite(ec);
  });
}

void Session::OnWrite(const beast::error_code& ec) {
  writing_ = false;
  ++write_generation_;
  write_timer_.cancel();
  for (const std::string& bytes : in_flight_) queued_bytes_ -= bytes.size();
  in_flight_.clear();
  if (closed_) return;
  if (ec) return Close();
  MaybeWrite();
}

void Session::OnResponseDone() {
  if (abort_after_write_) return Close();
  const bool keep_alive = current_->keep_alive();
  current_->Finish();
  current_.reset();
  response_complete_ = false;
  if (host_->draining()) return Close();  // the response is out; don't hold up Shutdown
  if (!keep_alive) return Linger();
  ArmTimer(host_->options().idle_timeout);
  if (!reading_) ReadRequest();  // else the pending watch read continues into it
}

// ---- Closing -------------------------------------------------------------------------------

void Session::Linger() {
  lingering_ = true;
  buffer_.consume(buffer_.size());
  stream_.SendCloseNotify();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  ArmTimer(kLingerTimeout);
  StartWatch();
}

void Session::ArmTimer(absl::Duration timeout) {
  DisarmTimer();
  // Non-positive or absurdly long (including infinite) timeouts mean none.
  if (timeout <= absl::ZeroDuration() || timeout > absl::Hours(24 * 365)) return;
  timer_.expires_after(absl::ToChronoNanoseconds(timeout));
  timer_.async_wait(
      [self = shared_from_this(), generation = timer_generation_](beast::error_code ec) {
        if (!ec && generation == self->timer_generation_) self->Close();
      });
}

void Session::DisarmTimer() {
  ++timer_generation_;
  timer_.cancel();
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  DisarmTimer();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  ++write_generation_;
  write_timer_.cancel();
  for (const std::string& bytes : write_queue_) queued_bytes_ -= bytes.size();
  write_queue_.clear();  // in_flight_ stays with the write, which now fails
  if (current_ != nullptr) {
    current_->Close();  // runs the request's OnClose callbacks
    current_.reset();
  }
  host_->OnSessionClosed(id_);
}

}  // namespace strata::http::internal
