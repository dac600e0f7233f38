#pragma once
// One client connection: reads requests, hands them to the server's handlers, writes their
// responses, and notices the client leaving while a response is in flight.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exchange.h"
#include "strata/http/server.h"
#include "stream.h"

namespace strata::http::internal {

// A parsed HTTP/1.1 message as the server hands it to a handler: header names lower-cased,
// repeated headers joined with ", ", the path without its query.
Request ToRequest(boost::beast::http::request<boost::beast::http::string_body>&& message,
                  std::string remote);

// What a connection needs from its server.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual const ServerOptions& options() const = 0;
  // True once Shutdown began: connections close after their current response.
  virtual bool draining() const = 0;
  // Runs the route's handler, or answers 404/405. Called on the connection's strand.
  virtual void Dispatch(const Request& request, std::shared_ptr<ResponseWriter> writer) = 0;
  // The connection closed its socket. Called once, on its strand.
  virtual void OnSessionClosed(uint64_t id) = 0;
};

// Threading: every private method runs on the strand that is the socket's executor, so the
// session's state needs no lock. The public methods are thread-safe and post to that strand.
//
// Reads: at most one read is outstanding. Between responses it is the request read (Beast's
// parser); while a response is in flight and nothing is buffered it is a "watch" read_some
// whose bytes are kept for the next request and whose EOF/error means the client is gone
// (closing the exchange at once, so its OnClose callbacks cancel the work). A watch read still
// pending when the response ends hands over to the next request read when it completes.
//
// Writes: the exchange's bytes are moved into `write_queue_` and gather-written, one
// async_write at a time, in order.
//
// TLS: the handshake runs first, under handshake_timeout; then the same reads and writes go
// through the Stream, so every limit (idle and write timeouts, the queue bound) holds as it
// does in plaintext.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `socket` must have a strand as its executor. `tls_context`: null for plaintext, else the
  // TLS context the connection's handshake uses (the session keeps its own reference).
  Session(boost::asio::ip::tcp::socket socket, SSL_CTX* tls_context, uint64_t id,
          SessionHost* host);

  uint64_t id() const { return id_; }
  void Start();
  // Closes now if no request is in flight, else once its response has been written.
  void BeginDrain();
  void ForceClose();
  // For the server after its I/O threads have stopped: closes on the calling thread.
  void CloseAfterStop() { Close(); }
  // Called by `exchange` (under its lock) when it has bytes waiting.
  void PostFlush(std::shared_ptr<Exchange> exchange);

 private:
  void OnHandshake(const boost::system::error_code& ec);
  // A plaintext HTTP request on the TLS port: a plaintext 400 saying so, then close.
  void RejectPlaintext();
  void DrainUntilClose();  // reads and drops bytes until EOF or the timer closes the socket
  void ReadRequest();
  void OnHeader(const boost::beast::error_code& ec);
  void ReadBody();
  void OnBody(const boost::beast::error_code& ec);
  void OnReadError(const boost::beast::error_code& ec);
  void Dispatch();
  void SendError(int status, std::string message);
  std::shared_ptr<ResponseWriter> BeginExchange(bool keep_alive, bool http11);

  void StartWatch();
  void OnWatch(const boost::beast::error_code& ec, size_t bytes);

  void Flush(const std::shared_ptr<Exchange>& exchange);
  void MaybeWrite();
  void OnWrite(const boost::beast::error_code& ec);
  void OnResponseDone();

  void Linger();
  void ArmTimer(absl::Duration timeout);
  void DisarmTimer();
  void Close();

  const uint64_t id_;
  SessionHost* const host_;
  const boost::asio::any_io_executor executor_;  // the strand
  Stream stream_;
  boost::asio::steady_timer timer_;  // idle timeout between requests; linger before close
  uint64_t timer_generation_ = 0;    // a timer completion from an older arming is ignored
  std::string remote_;

  boost::beast::flat_buffer buffer_;  // received bytes not yet parsed
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool reading_ = false;    // a read (request or watch) is outstanding
  bool lingering_ = false;  // our side is shut down; reads are discarded until EOF or timeout
  bool closed_ = false;
  // TLS with client certificates required and none presented: only probe paths are served.
  bool probes_only_ = false;

  std::shared_ptr<Exchange> current_;  // the request in flight, if any
  bool response_complete_ = false;     // current_ handed over its last bytes
  bool abort_after_write_ = false;     // current_'s stream was abandoned

  std::vector<std::string> write_queue_;  // waiting for the next write
  std::vector<std::string> in_flight_;    // owned by the outstanding write
  size_t queued_bytes_ = 0;               // in write_queue_ and in_flight_
  boost::asio::steady_timer write_timer_;  // the outstanding write's deadline
  uint64_t write_generation_ = 0;
  std::vector<boost::asio::const_buffer> buffers_;
  bool writing_ = false;
};

}  // namespace strata::http::internal
