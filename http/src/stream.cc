#include "stream.h"

#include <openssl/err.h>

#include <cerrno>

namespace strata::http::internal {

Stream::Stream(boost::asio::ip::tcp::socket socket, SSL_CTX* context)
    : socket_(std::move(socket)), tls_(true) {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);  // OpenSSL reads and writes the descriptor itself
  ssl_ = SSL_new(context);
  if (ssl_ == nullptr || ec || SSL_set_fd(ssl_, static_cast<int>(socket_.native_handle())) != 1) {
    // Out of memory or a dead socket: the handshake fails at once and the session closes.
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    socket_.close(ec);
    tls_error_ = "cannot set up TLS on the connection";
    return;
  }
  SSL_set_accept_state(ssl_);
}

Stream::~Stream() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

Stream::Want Stream::Step(Op op, void* data, size_t size, size_t* bytes,
                          boost::system::error_code* ec) {
  if (ssl_ == nullptr) {
    *ec = boost::asio::error::bad_descriptor;
    return Want::kDone;
  }
  ERR_clear_error();
  errno = 0;
  int result = 0;
  switch (op) {
    case Op::kHandshake:
      result = SSL_do_handshake(ssl_);
      break;
    case Op::kRead:
      result = SSL_read_ex(ssl_, data, size, bytes);
      break;
    case Op::kWrite:
      result = SSL_write_ex(ssl_, data, size, bytes);
      break;
  }
  if (result == 1) return Want::kDone;
  *bytes = 0;
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, result)) {
    case SSL_ERROR_WANT_READ:
      return Want::kRead;
    case SSL_ERROR_WANT_WRITE:
      return Want::kWrite;
    case SSL_ERROR_ZERO_RETURN:  // close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a bare EOF
      *ec = boost::asio::error::eof;
      return Want::kDone;
    case SSL_ERROR_SYSCALL:
      *ec = saved_errno != 0
                ? boost::system::error_code(saved_errno, boost::system::system_category())
                : boost::system::error_code(boost::asio::error::eof);
      tls_error_ = ec->message();
      return Want::kDone;
    default: {
      const unsigned long error = ERR_peek_last_error();
      plaintext_http_ =
          ERR_GET_LIB(error) == ERR_LIB_SSL && (ERR_GET_REASON(error) == SSL_R_HTTP_REQUEST ||
                                                ERR_GET_REASON(error) == SSL_R_HTTPS_PROXY_REQUEST);
      char text[256];
      ERR_error_string_n(error, text, sizeof(text));
      tls_error_ = text;
      *ec = boost::asio::error::connection_aborted;
      ERR_clear_error();
      return Want::kDone;
    }
  }
}

bool Stream::peer_certificate() const {
  if (ssl_ == nullptr) return false;
  X509* cert = SSL_get0_peer_certificate(ssl_);
  return cert != nullptr && SSL_get_verify_result(ssl_) == X509_V_OK;
}

void Stream::SendCloseNotify() {
  if (ssl_ == nullptr || !socket_.is_open() || !SSL_is_init_finished(ssl_)) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // writes the alert if the socket takes it; the result does not matter
  ERR_clear_error();
}

}  // namespace strata::http::internal
