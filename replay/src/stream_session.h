#pragma once
// One replayed request: connect, POST, read the SSE stream, fill a RequestResult.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "strata/replay/replayer.h"

namespace strata::replay::internal {

using Clock = std::chrono::steady_clock;

// Seconds from `origin` to now.
inline double SecondsSince(Clock::time_point origin) {
  return std::chrono::duration<double>(Clock::now() - origin).count();
}

// Parses the SSE byte stream incrementally and records the measurements into a RequestResult.
// Pure (no I/O), so tests can drive it directly.
class SseRecorder {
 public:
  SseRecorder(RequestResult* result, Clock::time_point origin) : r_(result), origin_(origin) {}

  // Feeds body bytes that arrived at `now_s` (seconds since origin). Returns false once the
  // stream is finished ([DONE] seen) or failed (r_->error set).
  bool Feed(std::string_view bytes, double now_s);
  bool done() const { return done_; }
  // The `id:` of the last complete event ("" before any): a retry's Last-Event-ID.
  const std::string& last_event_id() const { return last_event_id_; }
  // Forgets the bytes of an event that was not complete when the connection broke (its retry
  // sends it again).
  void DropPartialEvent() { pending_.clear(); }

 private:
  void OnEvent(std::string_view data, double now_s);
  void OnChunk(const std::string& json_text, double now_s);
  void Fail(ErrorKind kind, std::string type, std::string message);

  RequestResult* r_;
  Clock::time_point origin_;
  std::string pending_;  // Bytes after the last complete event.
  std::string last_event_id_;
  double last_chunk_s_ = -1.0;
  bool done_ = false;
};

// A client TLS context: TLS 1.2 or later, ALPN http/1.1, the server verified against `ca_file`
// (PEM; "" = the system's CA store). InvalidArgument naming the file when it does not load.
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeClientTlsContext(
    const std::string& ca_file);

// One client connection: TCP, or TLS over it (Beast's ssl_stream) checking that the server's
// certificate chains to the context's CAs and names `host`. Each Connect starts afresh (a
// retry's connection gets a new TLS state). The deadline covers the connect, the handshake and
// every later read and write (tcp().expires_at).
class ClientStream {
 public:
  using TlsStream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

  // `tls` null: plaintext; else it must outlive this stream.
  ClientStream(boost::asio::any_io_executor executor, boost::asio::ssl::context* tls,
               std::string host)
      : executor_(executor), plain_(executor), tls_(tls), host_(std::move(host)) {}

  boost::beast::tcp_stream& tcp() {
    return tls_stream_ != nullptr ? boost::beast::get_lowest_layer(*tls_stream_) : plain_;
  }

  // Connects to one of `endpoints`, then (TLS) shakes hands; handler(error_code).
  template <typename Endpoints, typename Handler>
  void Connect(const Endpoints& endpoints, Clock::time_point deadline, Handler handler) {
    if (tls_ == nullptr) {
      plain_.expires_at(deadline);
      plain_.async_connect(endpoints,
                           [handler = std::move(handler)](boost::beast::error_code ec,
                                                          const auto&) mutable { handler(ec); });
      return;
    }
    NewTlsStream();
    tcp().expires_at(deadline);
    tcp().async_connect(endpoints, [this, handler = std::move(handler)](boost::beast::error_code ec,
                                                                        const auto&) mutable {
      if (ec) return handler(ec);
      tls_stream_->async_handshake(boost::asio::ssl::stream_base::client, std::move(handler));
    });
  }

  // Runs f(stream) with the stream to read and write: the TCP stream or the TLS one.
  template <typename F>
  void With(F&& f) {
    if (tls_stream_ != nullptr) {
      f(*tls_stream_);
    } else {
      f(plain_);
    }
  }

  void Close();
  // ec's message, with the certificate check's reason when that is what failed.
  std::string Describe(const boost::beast::error_code& ec) const;

 private:
  void NewTlsStream();

  boost::asio::any_io_executor executor_;
  boost::beast::tcp_stream plain_;
  boost::asio::ssl::context* tls_;
  std::string host_;
  std::unique_ptr<TlsStream> tls_stream_;
};

// Threading: every method runs on the session's strand (the socket's executor).
class StreamSession : public std::enable_shared_from_this<StreamSession> {
 public:
  struct Target {
    boost::asio::ip::tcp::resolver::results_type endpoints;
    std::shared_ptr<boost::asio::ssl::context> tls;  // null: plaintext
    std::string host;                                // what the certificate must name
    std::string host_header;
    std::string path;  // e.g. "/v1/completions"
    std::string api_key;
    double timeout_s = 600.0;
    int attempts = 1;  // ReplayOptions::attempts
    // Requests carry Idempotency-Key `key_prefix` + their index when attempts > 1.
    std::string key_prefix;
  };

  // `on_done` runs once, on the strand, after `result` is final.
  StreamSession(boost::asio::any_io_executor strand, const Target* target, std::string body,
                RequestResult* result, Clock::time_point origin, std::function<void()> on_done);
  // The Idempotency-Key this request sends (with Target::attempts > 1).
  void SetIdempotencyKey(std::string key);

  void Start();

 private:
  void Connect();
  // A connection error with attempts left: sends the request again after a backoff. False
  // when none are left (or the error was a timeout).
  bool Retry(boost::beast::error_code ec);
  void OnConnect(boost::beast::error_code ec);
  void OnWrite(boost::beast::error_code ec);
  void OnHeader(boost::beast::error_code ec);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  void ReadErrorBody();
  void Finish(ErrorKind kind, std::string type, std::string message);
  void FinishNetworkError(boost::beast::error_code ec, const char* during);

  ClientStream stream_;
  const Target* target_;
  boost::beast::http::request<boost::beast::http::string_body> request_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::response_parser<boost::beast::http::buffer_body>> parser_;
  boost::asio::steady_timer backoff_;
  int attempt_ = 1;
  char chunk_[16384];
  std::string error_body_;
  RequestResult* r_;
  Clock::time_point origin_;
  Clock::time_point deadline_;
  SseRecorder recorder_;
  std::function<void()> on_done_;
  bool finished_ = false;
};

}  // namespace strata::replay::internal
