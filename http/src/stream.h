#pragma once
// A connection's byte stream: the TCP socket itself, or TLS over it (OpenSSL's libssl reading
// and writing the non-blocking socket directly, the session's asio strand waiting for the
// socket to become readable or writable whenever OpenSSL says it wants to).
//
// It is an asio AsyncReadStream and AsyncWriteStream, so Beast's parser and asio::async_write
// use it as they use a socket. Contract, as for a socket: at most one read and one write
// outstanding, all on the socket's strand; the handshake before either. A TLS operation started
// or resumed after the socket was closed fails with bad_descriptor and never touches the file
// descriptor again (its number may already belong to another connection).
#include <openssl/ssl.h>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

namespace strata::http::internal {

class Stream {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;

  // Plaintext.
  explicit Stream(boost::asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  // TLS, server side, with a connection object of `context` (which keeps its own reference).
  // Puts the socket in non-blocking mode.
  Stream(boost::asio::ip::tcp::socket socket, SSL_CTX* context);

  executor_type get_executor() { return socket_.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return socket_; }
  const boost::asio::ip::tcp::socket& socket() const { return socket_; }
  bool tls() const { return tls_; }
  // Why the last TLS operation failed ("" if none did), for logs.
  const std::string& tls_error() const { return tls_error_; }
  // The last failure was a plaintext HTTP request sent to this TLS port.
  bool plaintext_http_seen() const { return plaintext_http_; }

  // Server handshake; handler(error_code). Only for tls().
  template <typename Handler>
  void async_handshake(Handler&& handler) {
    boost::asio::async_compose<Handler, void(boost::system::error_code, std::size_t)>(
        TlsOp{this, Op::kHandshake, nullptr, 0}, handler, socket_);
  }

  template <typename MutableBuffers, typename Handler>
  void async_read_some(const MutableBuffers& buffers, Handler&& handler) {
    if (!tls()) {
      socket_.async_read_some(buffers, std::forward<Handler>(handler));
      return;
    }
    // The first non-empty buffer: one SSL_read fills at most one.
    boost::asio::mutable_buffer first;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      boost::asio::mutable_buffer b(*it);
      if (b.size() > 0) {
        first = b;
        break;
      }
    }
    boost::asio::async_compose<Handler, void(boost::system::error_code, std::size_t)>(
        TlsOp{this, Op::kRead, first.data(), first.size()}, handler, socket_);
  }

  template <typename ConstBuffers, typename Handler>
  void async_write_some(const ConstBuffers& buffers, Handler&& handler) {
    if (!tls()) {
      socket_.async_write_some(buffers, std::forward<Handler>(handler));
      return;
    }
    // Small pieces (SSE chunks, a head and its body) go out as one record: they are gathered
    // into the operation's own copy, which SSL_write retries with until it is taken.
    auto copy = std::make_unique<std::string>();
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && copy->size() < kMaxGather; ++it) {
      boost::asio::const_buffer b(*it);
      const size_t take = std::min(b.size(), kMaxGather - copy->size());
      copy->append(static_cast<const char*>(b.data()), take);
    }
    void* data = copy->data();
    const size_t size = copy->size();
    boost::asio::async_compose<Handler, void(boost::system::error_code, std::size_t)>(
        TlsOp{this, Op::kWrite, data, size, std::move(copy)}, handler, socket_);
  }

  // After the handshake: the client presented a certificate (verified, or the handshake would
  // have failed).
  bool peer_certificate() const;

  // Sends TLS close_notify if the socket takes it now (a graceful close; never waits).
  void SendCloseNotify();

  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

 private:
  enum class Op { kHandshake, kRead, kWrite };
  enum class Want { kDone, kRead, kWrite };
  static constexpr size_t kMaxGather = 16 << 10;  // one TLS record's payload

  // One attempt of `op` on the SSL object: done (with *ec and *bytes set) or what to wait for.
  Want Step(Op op, void* data, size_t size, size_t* bytes, boost::system::error_code* ec);

  // The composed operation: attempt, wait for the socket as OpenSSL asks, attempt again. Its
  // first step runs from a post, so the handler never runs inside the initiating call.
  struct TlsOp {
    Stream* stream;
    Op op;
    void* data;
    size_t size;
    std::unique_ptr<std::string> owned = nullptr;  // a write's gathered bytes
    bool started = false;

    template <typename Self>
    void operator()(Self& self, boost::system::error_code ec = {}) {
      if (!started) {
        started = true;
        boost::asio::post(stream->socket_.get_executor(), std::move(self));
        return;
      }
      if (ec) return self.complete(ec, 0);
      if (!stream->socket_.is_open()) {
        return self.complete(boost::asio::error::bad_descriptor, 0);
      }
      if (op != Op::kHandshake && size == 0) return self.complete(ec, 0);
      size_t bytes = 0;
      switch (stream->Step(op, data, size, &bytes, &ec)) {
        case Want::kDone:
          return self.complete(ec, bytes);
        case Want::kRead:
          return stream->socket_.async_wait(boost::asio::socket_base::wait_read, std::move(self));
        case Want::kWrite:
          return stream->socket_.async_wait(boost::asio::socket_base::wait_write, std::move(self));
      }
    }
  };

  boost::asio::ip::tcp::socket socket_;
  bool tls_ = false;
  SSL* ssl_ = nullptr;  // null with tls_ only when setting it up failed
  std::string tls_error_;
  bool plaintext_http_ = false;
};

}  // namespace strata::http::internal
