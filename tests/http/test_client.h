#pragma once
// A tiny blocking HTTP/1.1 client over POSIX sockets for the server tests: it writes raw
// request bytes and parses responses itself (Content-Length, chunked, or until close), so the
// tests check the server's bytes on the wire, not another library's leniency. ConnectTls speaks
// the same over TLS (OpenSSL, the caller's client context).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace strata::http::testing {

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // decoded
  std::vector<std::string> chunks;             // chunk payloads, if chunked
  bool chunked = false;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

inline std::string Get(const std::string& target, const std::string& extra_headers = "") {
  return absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: test\r\n", extra_headers, "\r\n");
}

inline std::string Post(const std::string& target, const std::string& body,
                        const std::string& extra_headers = "") {
  return absl::StrCat("POST ", target, " HTTP/1.1\r\nHost: test\r\nContent-Length: ", body.size(),
                      "\r\n", extra_headers, "\r\n", body);
}

class TestClient {
 public:
  // Connects to 127.0.0.1:port; null on failure. Reads give up after `timeout_s` seconds.
  static std::unique_ptr<TestClient> Connect(int port, int timeout_s = 20) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return nullptr;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(fd);
      return nullptr;
    }
    timeval tv{.tv_sec = timeout_s, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return std::unique_ptr<TestClient>(new TestClient(fd));
  }

  // Connects and completes a TLS handshake with `context` (which says what to verify); null on
  // failure, with the reason in *error. `host`: the name checked against the certificate and
  // sent as SNI ("" = neither).
  static std::unique_ptr<TestClient> ConnectTls(int port, SSL_CTX* context,
                                                const std::string& host = "localhost",
                                                std::string* error = nullptr, int timeout_s = 20) {
    // OpenSSL writes with write(2): a server that closed must give EPIPE, not end the test.
    std::signal(SIGPIPE, SIG_IGN);
    auto client = Connect(port, timeout_s);
    if (client == nullptr) return nullptr;
    client->ssl_ = SSL_new(context);
    SSL_set_fd(client->ssl_, client->fd_);
    if (!host.empty()) {
      SSL_set_tlsext_host_name(client->ssl_, host.c_str());
      SSL_set1_host(client->ssl_, host.c_str());
    }
    if (SSL_connect(client->ssl_) != 1) {
      if (error != nullptr) {
        *error = absl::StrCat("handshake failed: verify result ",
                              X509_verify_cert_error_string(SSL_get_verify_result(client->ssl_)));
      }
      return nullptr;
    }
    return client;
  }

  ~TestClient() { Close(); }

  void Close() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ssl_ = nullptr;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  SSL* ssl() const { return ssl_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ssl_ != nullptr ? SSL_write(ssl_, data.data(), int(data.size()))
                                        : ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Status line and headers only.
  std::optional<Response> ReadHead() {
    auto status_line = ReadLine();
    if (!status_line || status_line->rfind("HTTP/1.1 ", 0) != 0) return std::nullopt;
    Response response;
    if (!absl::SimpleAtoi(status_line->substr(9, 3), &response.status)) return std::nullopt;
    while (true) {
      auto line = ReadLine();
      if (!line) return std::nullopt;
      if (line->empty()) break;
      const size_t colon = line->find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string name = absl::AsciiStrToLower(line->substr(0, colon));
      response.headers[name] = std::string(absl::StripAsciiWhitespace(line->substr(colon + 1)));
    }
    response.chunked = response.Header("transfer-encoding") == "chunked";
    return response;
  }

  // One chunk of a chunked body: its payload, "" for the last chunk, nullopt on a framing error
  // or EOF.
  std::optional<std::string> ReadChunk() {
    auto size_line = ReadLine();
    if (!size_line) return std::nullopt;
    char* end = nullptr;
    const unsigned long size = std::strtoul(size_line->c_str(), &end, 16);
    if (size_line->empty() || end != size_line->c_str() + size_line->size()) return std::nullopt;
    auto data = ReadExact(size);
    auto crlf = ReadExact(2);
    if (!data || !crlf || *crlf != "\r\n") return std::nullopt;
    return data;
  }

  // A whole response (Content-Length or chunked; HTTP/1.0-style streams read until close).
  std::optional<Response> ReadResponse() {
    auto response = ReadHead();
    if (!response) return std::nullopt;
    if (response->chunked) {
      while (true) {
        auto chunk = ReadChunk();
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        response->body += *chunk;
        response->chunks.push_back(std::move(*chunk));
      }
      return response;
    }
    size_t length = 0;
    if (!absl::SimpleAtoi(response->Header("content-length"), &length)) {
      ReadUntilClose(&response->body);
      return response;
    }
    auto body = ReadExact(length);
    if (!body) return std::nullopt;
    response->body = std::move(*body);
    return response;
  }

  // True if the server closes the connection (EOF or reset) before the read timeout, with no
  // further bytes.
  bool ReadEof() {
    if (!buffer_.empty()) return false;
    char c;
    if (ssl_ != nullptr) {
      const int n = SSL_read(ssl_, &c, 1);
      const int error = SSL_get_error(ssl_, n);
      return n <= 0 && (error == SSL_ERROR_ZERO_RETURN ||
                        (error == SSL_ERROR_SYSCALL && (errno == 0 || errno == ECONNRESET)));
    }
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  void ReadUntilClose(std::string* out) {
    *out += buffer_;
    buffer_.clear();
    while (Fill()) {
      *out += buffer_;
      buffer_.clear();
    }
  }

 private:
  explicit TestClient(int fd) : fd_(fd) {}

  bool Fill() {
    char data[16384];
    const ssize_t n =
        ssl_ != nullptr ? SSL_read(ssl_, data, sizeof(data)) : ::recv(fd_, data, sizeof(data), 0);
    if (n <= 0) return false;
    buffer_.append(data, static_cast<size_t>(n));
    return true;
  }

  std::optional<std::string> ReadLine() {
    size_t pos;
    while ((pos = buffer_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return std::nullopt;
    }
    std::string line = buffer_.substr(0, pos);
    buffer_.erase(0, pos + 2);
    return line;
  }

  std::optional<std::string> ReadExact(size_t n) {
    while (buffer_.size() < n) {
      if (!Fill()) return std::nullopt;
    }
    std::string data = buffer_.substr(0, n);
    buffer_.erase(0, n);
    return data;
  }

  int fd_;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

}  // namespace strata::http::testing
