// `strata up --routers N`'s TCP front (cli/src/tcp_front.h) over real loopback sockets: bytes
// pass both ways unchanged, connections spread over the backends, a dead backend is skipped so
// no connection is refused while one backend accepts, a backend that dies mid-answer cuts its
// connection towards the client, and every connection is refused only when no backend accepts.
#include "tcp_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace strata::cli {
namespace {

int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(*port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  listen(fd, 64);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Reads until EOF (or an error or the 10 s timeout): the bytes, and whether EOF came cleanly.
std::pair<std::string, bool> ReadAll(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return {out, true};
    if (n < 0) return {out, false};
    out.append(buf, size_t(n));
  }
}

// A backend: answers each connection with its name and ':', then echoes everything it reads
// until the client half-closes; or, when told to, reads the request, sends part of an answer
// and resets the connection.
class Backend {
 public:
  explicit Backend(std::string name, int port = 0) : name_(std::move(name)) {
    port_ = port;
    fd_ = Listen(&port_);
    EXPECT_GE(fd_, 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~Backend() { Stop(); }
  void Stop() {
    if (fd_ < 0) return;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    fd_ = -1;
    thread_.join();
  }
  int port() const { return port_; }
  int served() const { return served_.load(); }
  void DieMidAnswer() { die_ = true; }

 private:
  void Serve() {
    for (;;) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++served_;
      std::thread([this, c] {
        if (die_) {  // takes the request, starts answering, dies
          char req[64];
          (void)!recv(c, req, sizeof(req), 0);
          SendAll(c, name_ + ":partial");
          linger l{1, 0};  // close with a reset
          setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
          close(c);
          return;
        }
        SendAll(c, name_ + ":");
        char buf[65536];
        for (;;) {
          const ssize_t n = recv(c, buf, sizeof(buf), 0);
          if (n <= 0) break;
          if (!SendAll(c, std::string(buf, size_t(n)))) break;
        }
        close(c);
      }).detach();
    }
  }

  std::string name_;
  int port_ = 0;
  int fd_ = -1;
  std::atomic<int> served_{0};
  std::atomic<bool> die_{false};
  std::thread thread_;
};

std::unique_ptr<TcpFront> StartFront(std::vector<int> ports) {
  TcpFrontOptions o;
  for (int p : ports) o.backends.push_back(absl::StrCat("127.0.0.1:", p));
  o.buffer_bytes = 64 << 10;
  auto front = std::make_unique<TcpFront>(o);
  EXPECT_TRUE(front->Start().ok());
  return front;
}

// One request through the front: the bytes sent, then a half-close; what came back.
std::pair<std::string, bool> RoundTrip(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return {"", false};
  SendAll(fd, request);
  shutdown(fd, SHUT_WR);
  auto got = ReadAll(fd);
  close(fd);
  return got;
}

TEST(TcpFrontTest, BytesPassBothWaysAndConnectionsSpreadOverTheBackends) {
  Backend a("a"), b("b");
  auto front = StartFront({a.port(), b.port()});
  std::string big(3 << 20, 'x');  // larger than the front's buffers: flow control is exercised
  for (size_t i = 0; i < big.size(); i += 4096) big[i] = char('a' + i / 4096 % 26);
  int from_a = 0, from_b = 0;
  for (int i = 0; i < 6; ++i) {
    auto [got, clean] = RoundTrip(front->port(), big);
    ASSERT_TRUE(clean);
    ASSERT_EQ(got.size(), big.size() + 2);
    EXPECT_EQ(got.substr(2), big);
    (got[0] == 'a' ? from_a : from_b)++;
  }
  EXPECT_EQ(from_a, 3);
  EXPECT_EQ(from_b, 3);
  EXPECT_EQ(front->stats().accepted, 6);
  EXPECT_EQ(front->stats().refused, 0);
}

TEST(TcpFrontTest, ADeadBackendIsSkippedAndNothingIsRefused) {
  Backend a("a");
  int dead_port = 0;
  const int held = Listen(&dead_port);  // a port nobody will accept on once closed
  close(held);
  auto front = StartFront({dead_port, a.port()});
  for (int i = 0; i < 8; ++i) {
    auto [got, clean] = RoundTrip(front->port(), "hello");
    ASSERT_TRUE(clean);
    EXPECT_EQ(got, "a:hello");
  }
  EXPECT_EQ(a.served(), 8);
  EXPECT_EQ(front->stats().refused, 0);
  EXPECT_GE(front->stats().backend_retries, 1);

  // A backend that comes back on its port takes connections again once its down time is over.
  Backend back("b", dead_port);
  absl::SleepFor(absl::Milliseconds(1100));
  int from_b = 0;
  for (int i = 0; i < 6; ++i) from_b += RoundTrip(front->port(), "hi").first[0] == 'b';
  EXPECT_GE(from_b, 2);
}

TEST(TcpFrontTest, ABackendThatDiesMidAnswerCutsTheClientsConnection) {
  Backend a("a"), b("b");
  a.DieMidAnswer();
  auto front = StartFront({a.port(), b.port()});  // the first connection goes to a
  const int fd = Connect(front->port());
  ASSERT_GE(fd, 0);
  SendAll(fd, "request");
  auto [got, clean] = ReadAll(fd);
  close(fd);
  // The request reached a, which may have acted on it: the client's connection ends with a's
  // (what a sent may or may not arrive first), and no other backend's answer is spliced in.
  EXPECT_TRUE(got.empty() || got.rfind("a:", 0) == 0) << got;
  EXPECT_EQ(got.find("b:"), std::string::npos) << got;
  EXPECT_EQ(a.served(), 1);
  EXPECT_EQ(b.served(), 0);
  EXPECT_EQ(front->stats().refused, 0);
  // The next connection is b's.
  EXPECT_EQ(RoundTrip(front->port(), "x").first, "b:x");
}

TEST(TcpFrontTest, WithNoBackendAcceptingTheClientIsRefused) {
  int p1 = 0, p2 = 0;
  close(Listen(&p1));
  close(Listen(&p2));
  auto front = StartFront({p1, p2});
  auto [got, clean] = RoundTrip(front->port(), "hello");
  EXPECT_EQ(got, "");
  EXPECT_EQ(front->stats().refused, 1);
  EXPECT_EQ(front->stats().open, 0);
}

TEST(TcpFrontTest, BadBackendsAndTakenPortsAreErrors) {
  TcpFrontOptions none;
  EXPECT_FALSE(TcpFront(none).Start().ok());
  TcpFrontOptions bad;
  bad.backends = {"no-port"};
  EXPECT_FALSE(TcpFront(bad).Start().ok());
  int port = 0;
  const int held = Listen(&port);
  TcpFrontOptions taken;
  taken.port = port;
  taken.backends = {"127.0.0.1:1"};
  const absl::Status s = TcpFront(taken).Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(absl::StrCat(port)), std::string::npos) << s;
  close(held);
}

}  // namespace
}  // namespace strata::cli
