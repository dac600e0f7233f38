#include "tcp_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace strata::cli {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<sockaddr_in> Resolve(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not host:port"));
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string host = host_port.substr(0, colon), port = host_port.substr(colon + 1);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("resolving ", host_port, ": ", gai_strerror(rc)));
  }
  sockaddr_in out;
  std::memcpy(&out, res->ai_addr, sizeof(out));
  freeaddrinfo(res);
  return out;
}

// A bounded byte queue: appended at the end, consumed from the front.
struct Buffer {
  std::string data;
  size_t head = 0;
  size_t size() const { return data.size() - head; }
  const char* begin() const { return data.data() + head; }
  void Consume(size_t n) {
    head += n;
    if (head == data.size()) {
      data.clear();
      head = 0;
    }
  }
};

}  // namespace

// One client connection and its backend connection. The epoll data of each socket points at
// its Side.
struct TcpFront::Conn {
  struct Side {
    Conn* conn;
    bool client;
  };
  int client_fd = -1;
  int backend_fd = -1;
  Side client_side{this, true};
  Side backend_side{this, false};
  bool connecting = false;
  bool backend_watched = false;  // backend_fd is in the epoll set
  absl::Time connect_deadline;
  size_t backend = 0;      // index into the backends
  size_t attempts = 0;     // backends tried for this connection
  bool sent_any = false;   // bytes went to the backend: another backend cannot take over
  bool client_eof = false;
  bool backend_eof = false;
  bool backend_write_shut = false;
  bool closed = false;
  Buffer to_backend;  // read from the client, not yet written to the backend
  Buffer to_client;   // read from the backend, not yet written to the client
};

TcpFront::TcpFront(TcpFrontOptions options) : options_(std::move(options)) {}

TcpFront::~TcpFront() { Stop(); }

absl::Status TcpFront::Start() {
  if (options_.backends.empty()) return absl::InvalidArgumentError("the front needs backends");
  for (const std::string& b : options_.backends) {
    if (auto a = Resolve(b); !a.ok()) return a.status();
  }
  auto bind_addr = Resolve(absl::StrCat(options_.host, ":", options_.port));
  if (!bind_addr.ok()) return bind_addr.status();
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Errno("socket");
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<const sockaddr*>(&*bind_addr), sizeof(*bind_addr)) != 0) {
    const absl::Status s = Errno(absl::StrCat("binding ", options_.host, ":", options_.port));
    close(listen_fd_);
    listen_fd_ = -1;
    return s;
  }
  if (listen(listen_fd_, 1024) != 0) return Errno("listen");
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.sin_port);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Errno("epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the listener
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.ptr = &wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void TcpFront::Stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
  listen_fd_ = epoll_fd_ = wake_fd_ = -1;
}

TcpFront::Stats TcpFront::stats() const {
  return {accepted_.load(), refused_.load(), retries_.load(), open_.load()};
}

void TcpFront::Run() {
  std::vector<sockaddr_in> addrs;
  for (const std::string& b : options_.backends) addrs.push_back(*Resolve(b));
  std::vector<absl::Time> down_until(addrs.size(), absl::InfinitePast());
  size_t next_backend = 0;
  std::unordered_map<Conn*, std::unique_ptr<Conn>> conns;
  std::vector<Conn*> graveyard;  // closed during a batch of events, freed after it

  auto update = [&](Conn* c) {
    if (c->closed) return;
    epoll_event ev{};
    ev.events = 0;
    if (!c->client_eof && c->to_backend.size() < options_.buffer_bytes) ev.events |= EPOLLIN;
    if (c->to_client.size() > 0) ev.events |= EPOLLOUT;
    ev.data.ptr = &c->client_side;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->client_fd, &ev);
    if (c->backend_fd < 0) return;
    ev.events = 0;
    if (c->connecting) {
      ev.events = EPOLLOUT;
    } else {
      if (!c->backend_eof && c->to_client.size() < options_.buffer_bytes) ev.events |= EPOLLIN;
      if (c->to_backend.size() > 0) ev.events |= EPOLLOUT;
    }
    ev.data.ptr = &c->backend_side;
    // A socket with nothing wanted leaves the set: a hung-up backend would otherwise be
    // reported on every wait while the client drains what it sent.
    if (ev.events == 0) {
      if (c->backend_watched) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->backend_fd, nullptr);
      c->backend_watched = false;
    } else {
      epoll_ctl(epoll_fd_, c->backend_watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->backend_fd, &ev);
      c->backend_watched = true;
    }
  };
  auto close_conn = [&](Conn* c) {
    if (c->closed) return;
    c->closed = true;
    --open_;  // counted before the client can see its connection end
    if (c->backend_fd >= 0) close(c->backend_fd);  // close() also leaves the epoll set
    close(c->client_fd);
    graveyard.push_back(c);
  };
  // Starts a connect to the next backend not marked down (all down: the next in turn anyway).
  // Returns false when every backend has been tried for this connection.
  auto connect_next = [&](Conn* c) -> bool {
    if (c->backend_fd >= 0) {
      close(c->backend_fd);
      c->backend_fd = -1;
      c->backend_watched = false;
    }
    while (c->attempts < addrs.size()) {
      size_t pick = next_backend % addrs.size();
      const absl::Time now = absl::Now();
      for (size_t k = 0; k < addrs.size(); ++k) {
        const size_t i = (next_backend + k) % addrs.size();
        if (down_until[i] <= now) {
          pick = i;
          break;
        }
      }
      next_backend = pick + 1;
      ++c->attempts;
      c->backend = pick;
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return false;
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addrs[pick]), sizeof(sockaddr_in));
      if (rc != 0 && errno != EINPROGRESS) {
        close(fd);
        down_until[pick] = absl::Now() + options_.down_for;
        ++retries_;
        continue;
      }
      c->backend_fd = fd;
      c->connecting = true;
      c->connect_deadline = absl::Now() + options_.connect_timeout;
      epoll_event ev{};
      ev.events = EPOLLOUT;
      ev.data.ptr = &c->backend_side;
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
      c->backend_watched = true;
      return true;
    }
    return false;
  };
  // The backend's connect failed: another backend takes the connection if nothing was sent.
  auto backend_failed = [&](Conn* c) {
    down_until[c->backend] = absl::Now() + options_.down_for;
    if (!c->sent_any && c->to_client.size() == 0 && !c->backend_eof) {
      ++retries_;
      if (connect_next(c)) {
        update(c);
        return;
      }
      ++refused_;
    }
    close_conn(c);
  };
  auto pump = [&](Conn* c) {
    // client -> backend
    while (!c->connecting && c->backend_fd >= 0 && c->to_backend.size() > 0) {
      const ssize_t n =
          send(c->backend_fd, c->to_backend.begin(), c->to_backend.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c->sent_any = true;
        c->to_backend.Consume(size_t(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);
      return;
    }
    if (c->client_eof && c->to_backend.size() == 0 && !c->connecting && !c->backend_write_shut &&
        c->backend_fd >= 0) {
      shutdown(c->backend_fd, SHUT_WR);
      c->backend_write_shut = true;
    }
    // backend -> client
    while (c->to_client.size() > 0) {
      const ssize_t n = send(c->client_fd, c->to_client.begin(), c->to_client.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c->to_client.Consume(size_t(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);
      return;
    }
    // The backend has said everything and the client has it all; or the client left and the
    // backend has nothing more to take.
    if ((c->backend_eof && c->to_client.size() == 0) ||
        (c->client_eof && c->backend_write_shut && c->backend_eof)) {
      close_conn(c);
      return;
    }
    update(c);
  };
  auto read_into = [&](int fd, Buffer& buf, bool* eof) -> bool {
    char chunk[64 << 10];
    while (buf.size() < options_.buffer_bytes) {
      const size_t want = std::min(sizeof(chunk), options_.buffer_bytes - buf.size());
      const ssize_t n = recv(fd, chunk, want, 0);
      if (n > 0) {
        buf.data.append(chunk, size_t(n));
        continue;
      }
      if (n == 0) {
        *eof = true;
        return true;
      }
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    return true;
  };

  std::vector<epoll_event> events(256);
  absl::Time next_deadline_scan = absl::InfinitePast();
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_fd_, events.data(), int(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &wake_fd_) continue;
      if (tag == nullptr) {  // the listener
        for (;;) {
          const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;
          ++accepted_;
          if (open_.load() >= options_.max_connections) {
            ++refused_;
            close(fd);
            continue;
          }
          const int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          auto conn = std::make_unique<Conn>();
          Conn* c = conn.get();
          c->client_fd = fd;
          ++open_;
          conns.emplace(c, std::move(conn));
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.ptr = &c->client_side;
          epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
          if (!connect_next(c)) {
            ++refused_;
            close_conn(c);
          }
        }
        continue;
      }
      auto* side = static_cast<Conn::Side*>(tag);
      Conn* c = side->conn;
      if (c->closed) continue;
      const uint32_t ev = events[i].events;
      if (side->client) {
        if (ev & (EPOLLHUP | EPOLLERR)) {  // gone both ways: nobody is left to answer
          close_conn(c);
          continue;
        }
        if (ev & EPOLLIN) {
          if (!read_into(c->client_fd, c->to_backend, &c->client_eof)) {
            close_conn(c);
            continue;
          }
        }
      } else if (c->connecting) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->backend_fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0 || (ev & EPOLLERR)) {
          backend_failed(c);
          continue;
        }
        c->connecting = false;
      } else if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        if (!read_into(c->backend_fd, c->to_client, &c->backend_eof)) {
          // A reset before any answer byte, for a request not yet (fully) sent, can go
          // elsewhere; otherwise the client's connection is cut with the backend's.
          backend_failed(c);
          continue;
        }
      }
      pump(c);
    }
    // Connects that take too long count as refused. Looked for every 100 ms, not after every
    // batch of events: the scan covers every open connection.
    const absl::Time now = absl::Now();
    if (now >= next_deadline_scan) {
      next_deadline_scan = now + absl::Milliseconds(100);
      for (auto& [raw, conn] : conns) {
        if (!raw->closed && raw->connecting && now > raw->connect_deadline) backend_failed(raw);
      }
    }
    for (Conn* c : graveyard) conns.erase(c);
    graveyard.clear();
  }
  for (auto& [raw, conn] : conns) close_conn(raw);
}

}  // namespace strata::cli
