#include "supervisor.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "strata/engine/presets.h"

namespace strata::cli {
namespace {

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(char* const* argv, int log_fd, int null_fd, int err_fd, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);  // the supervisor died before prctl took effect
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);  // the mask survives exec: clear sigwait's blocks
  dup2(null_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  execv(argv[0], argv);
  const int err = errno;
  [[maybe_unused]] ssize_t n = write(err_fd, &err, sizeof(err));
  _exit(127);
}

// Forks and execs; returns the pid once exec succeeded (the CLOEXEC pipe closes without data).
// `log_marker` empty: the log starts empty; else the log is appended to, after that line.
absl::StatusOr<pid_t> Spawn(const ProcessSpec& spec, const std::string& log_marker = "") {
  if (spec.argv.empty()) return absl::InvalidArgumentError(spec.name + ": empty command");
  const int log_fd =
      open(spec.log_path.c_str(),
           O_WRONLY | O_CREAT | O_CLOEXEC | (log_marker.empty() ? O_TRUNC : O_APPEND), 0644);
  if (log_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(spec.name, ": cannot open log ", spec.log_path, ": ", std::strerror(errno)));
  }
  if (!log_marker.empty()) {
    const std::string line = log_marker + "\n";
    [[maybe_unused]] ssize_t n = write(log_fd, line.data(), line.size());
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int pipe_fds[2];
  if (null_fd < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return absl::InternalError(absl::StrCat(spec.name, ": ", std::strerror(errno)));
  }
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) ExecChild(argv.data(), log_fd, null_fd, pipe_fds[1], parent);
  const int fork_errno = errno;
  close(pipe_fds[1]);
  close(log_fd);
  close(null_fd);
  if (pid < 0) {
    close(pipe_fds[0]);
    return absl::InternalError(absl::StrCat(spec.name, ": fork: ", std::strerror(fork_errno)));
  }
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(pipe_fds[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n == sizeof(exec_errno)) {
    waitpid(pid, nullptr, 0);
    return absl::FailedPreconditionError(
        absl::StrCat(spec.name, ": cannot run ", spec.argv[0], ": ", std::strerror(exec_errno)));
  }
  return pid;
}

struct Url {
  bool tls = false;
  std::string host;
  int port = 0;
  std::string path;
};

// "http[s]://host:port/path" only; enough for the URLs this file builds.
absl::StatusOr<Url> ParseUrl(const std::string& url) {
  Url out;
  out.tls = url.starts_with("https://");
  const std::string_view scheme = out.tls ? "https://" : "http://";
  if (!url.starts_with(scheme)) return absl::InvalidArgumentError("not an http URL: " + url);
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = authority.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(authority.substr(colon + 1), &out.port)) {
    return absl::InvalidArgumentError("URL without a port: " + url);
  }
  out.host = authority.substr(0, colon);
  return out;
}

int RemainingMs(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

// Connects within the deadline; -1 on failure.
int ConnectWithDeadline(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) continue;
    int err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (poll(&p, 1, RemainingMs(deadline)) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

// Sends `request` over TLS on the connected `fd` and returns what arrives up to the end of the
// status line ("" on failure). Blocking reads and writes, each bounded by the time left. OpenSSL
// writes with write(2): the caller ignores SIGPIPE (`strata up` does).
std::string TlsExchange(int fd, const std::string& request, absl::Time deadline) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int64_t left_us =
      std::max<int64_t>(1000, absl::ToInt64Microseconds(deadline - absl::Now()));
  timeval tv{.tv_sec = left_us / 1000000, .tv_usec = left_us % 1000000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = ctx != nullptr ? SSL_new(ctx) : nullptr;
  std::string response;
  if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 && SSL_connect(ssl) == 1 &&
      SSL_write(ssl, request.data(), int(request.size())) == int(request.size())) {
    char buf[512];
    int n = 0;
    while (response.find("\r\n") == std::string::npos && absl::Now() < deadline &&
           (n = SSL_read(ssl, buf, sizeof(buf))) > 0) {
      response.append(buf, size_t(n));
    }
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ERR_clear_error();
  return response;
}

absl::StatusOr<int> StatusOfResponse(const std::string& response, const std::string& host,
                                     int port) {
  int status = 0;
  if (!response.starts_with("HTTP/1.") || response.size() < 12 ||
      !absl::SimpleAtoi(response.substr(9, 3), &status)) {
    return absl::UnavailableError(absl::StrCat("no HTTP response from ", host, ":", port));
  }
  return status;
}

}  // namespace

absl::StatusOr<int> HttpGetStatus(const std::string& host, int port, const std::string& path,
                                  absl::Duration timeout, bool tls) {
  const absl::Time deadline = absl::Now() + timeout;
  const int fd = ConnectWithDeadline(host, port, deadline);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port));
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                                           "\r\nConnection: close\r\n\r\n");
  std::string response;
  if (tls) {
    response = TlsExchange(fd, request, deadline);
    close(fd);
    return StatusOfResponse(response, host, port);
  }
  size_t sent = 0;
  bool failed = false;
  while (!failed && response.find("\r\n") == std::string::npos) {
    const bool sending = sent < request.size();
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) break;
    char buf[512];
    const ssize_t n = sending ? send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL)
                              : recv(fd, buf, sizeof(buf), 0);
    failed = n <= 0;
    if (n > 0 && sending) sent += static_cast<size_t>(n);
    if (n > 0 && !sending) response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return StatusOfResponse(response, host, port);
}

absl::StatusOr<std::vector<int>> PickFreePorts(const std::string& host, int n) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("host ", host, ": ", gai_strerror(rc)));
  }
  std::vector<int> fds, ports;
  absl::Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status =
          absl::UnavailableError(absl::StrCat("cannot bind to ", host, ": ", std::strerror(errno)));
    } else {
      ports.push_back(ntohs(addr.ss_family == AF_INET6
                                ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                : reinterpret_cast<sockaddr_in*>(&addr)->sin_port));
    }
    if (fd >= 0) fds.push_back(fd);
  }
  for (int fd : fds) close(fd);
  freeaddrinfo(res);
  if (!status.ok()) return status;
  return ports;
}

std::string TailFile(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

std::string ExitInfo::Describe() const {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return "ended";
}

std::optional<absl::Duration> RestartTracker::OnExit(const ExitInfo& exit, std::string* why_not) {
  if (rules_.policy == "never") {
    *why_not = "restart.policy is never";
    return std::nullopt;
  }
  if (rules_.policy == "on-failure" && WIFEXITED(exit.wait_status) &&
      WEXITSTATUS(exit.wait_status) == 0) {
    *why_not = "it exited with status 0 and restart.policy is on-failure";
    return std::nullopt;
  }
  if (exit.ran >= rules_.stable_after) in_a_row_ = 0;
  if (in_a_row_ >= rules_.max_consecutive) {
    *why_not = absl::StrCat("it ended ", in_a_row_ + 1, " times in a row within ",
                            absl::FormatDuration(rules_.stable_after),
                            " of starting (restart.max_consecutive ", rules_.max_consecutive, ")");
    return std::nullopt;
  }
  absl::Duration delay = rules_.first_delay;
  for (int i = 0; i < in_a_row_ && delay < rules_.max_delay; ++i) delay *= 2;
  ++in_a_row_;
  return std::min(delay, rules_.max_delay);
}

// ---- Supervisor ------------------------------------------------------------------------

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() { Stop(); }

absl::Status Supervisor::Start(const std::vector<ProcessSpec>& specs) {
  const int group = groups_++;
  for (const auto& spec : specs) {
    auto pid = Spawn(spec);
    if (!pid.ok()) return pid.status();
    Child child;
    child.spec = spec;
    child.pid = *pid;
    child.group = group;
    child.running = true;
    child.ready = spec.ready_url.empty();
    child.started = absl::Now();
    children_.push_back(std::move(child));
  }
  return absl::OkStatus();
}

absl::Status Supervisor::Restart(const std::string& name) {
  for (auto& child : children_) {
    if (child.spec.name != name) continue;
    if (child.running) return absl::FailedPreconditionError(name + " is still running");
    const std::string marker =
        absl::StrCat("---- strata up: ", name, " started again (restart ", child.restarts + 1,
                     ") at ", absl::FormatTime(absl::Now()), " ----");
    auto pid = Spawn(child.spec, marker);
    if (!pid.ok()) return pid.status();
    ++child.restarts;
    child.pid = *pid;
    child.running = true;
    child.ready = child.spec.ready_url.empty();
    child.started = absl::Now();
    return absl::OkStatus();
  }
  return absl::NotFoundError("no process named " + name);
}

absl::StatusOr<bool> Supervisor::CheckReady(Child& child, absl::Duration timeout) {
  auto url = ParseUrl(child.spec.ready_url);
  if (!url.ok()) return url.status();
  auto code = HttpGetStatus(url->host, url->port, url->path, timeout, url->tls);
  child.ready = code.ok() && *code == 200;
  return child.ready;
}

std::vector<std::string> Supervisor::PollReady(absl::Duration timeout) {
  std::vector<std::string> now_ready;
  for (auto& child : children_) {
    if (!child.running || child.ready) continue;
    if (absl::StatusOr<bool> ready = CheckReady(child, timeout); ready.ok() && *ready) {
      now_ready.push_back(child.spec.name);
    }
  }
  return now_ready;
}

bool Supervisor::TryReap(Child& child, ExitInfo* info) {
  if (!child.running) return false;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(child.pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return false;
  child.running = false;
  *info = ExitInfo{child.spec.name, child.pid,           status,
                   false,           child.spec.log_path, absl::Now() - child.started};
  return true;
}

std::vector<ExitInfo> Supervisor::ReapExited() {
  std::vector<ExitInfo> out;
  for (auto& child : children_) {
    ExitInfo info;
    if (TryReap(child, &info)) out.push_back(std::move(info));
  }
  return out;
}

absl::Status Supervisor::ExitedEarly(const ExitInfo& info) const {
  std::string msg = absl::StrCat(info.name, " ", info.Describe(),
                                 " before the cluster was ready (log: ", info.log_path, ")");
  const std::string tail = TailFile(info.log_path, options_.log_tail_lines);
  if (!tail.empty()) absl::StrAppend(&msg, "; last lines of its log:\n", tail);
  return absl::FailedPreconditionError(msg);
}

absl::Status Supervisor::WaitReady() {
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  while (true) {
    for (const auto& exit : ReapExited()) return ExitedEarly(exit);
    std::vector<std::string> waiting;
    for (auto& child : children_) {
      if (child.ready || !child.running) continue;
      auto ready = CheckReady(child, std::min(absl::Seconds(1), options_.ready_timeout));
      if (!ready.ok()) return ready.status();
      if (!*ready) waiting.push_back(child.spec.name);
    }
    if (waiting.empty()) return absl::OkStatus();
    if (options_.interrupted && options_.interrupted()) {
      return absl::CancelledError("interrupted while waiting for the cluster to be ready");
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("not ready after ",
                                                      absl::FormatDuration(options_.ready_timeout),
                                                      ": ", absl::StrJoin(waiting, ", ")));
    }
    absl::SleepFor(options_.poll_interval);
  }
}

void Supervisor::TerminateGroup(int group, std::vector<ExitInfo>& out) {
  const absl::Time deadline = absl::Now() + options_.grace;
  for (auto& child : children_) {
    if (child.group == group && child.running) kill(child.pid, SIGTERM);
  }
  bool left = true;
  while (left && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    left = false;
    for (auto& child : children_) {
      ExitInfo info;
      if (child.group == group && TryReap(child, &info)) out.push_back(std::move(info));
      left = left || (child.group == group && child.running);
    }
  }
  for (auto& child : children_) {
    if (child.group != group || !child.running) continue;
    kill(-child.pid, SIGKILL);  // its whole process group: helpers it started die too
    kill(child.pid, SIGKILL);
    int status = 0;
    while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    child.running = false;
    out.push_back(ExitInfo{child.spec.name, child.pid, status, true, child.spec.log_path,
                           absl::Now() - child.started});
  }
}

std::vector<ExitInfo> Supervisor::Stop() {
  std::vector<ExitInfo> out;
  for (int group = groups_ - 1; group >= 0; --group) TerminateGroup(group, out);
  return out;
}

size_t Supervisor::running() const {
  size_t n = 0;
  for (const auto& child : children_) n += child.running ? 1 : 0;
  return n;
}

pid_t Supervisor::pid(const std::string& name) const {
  for (const auto& child : children_) {
    if (child.spec.name == name && child.running) return child.pid;
  }
  return 0;
}

// ---- the processes of `strata up` ----------------------------------------------------------

std::string ConnectHost(const std::string& bind_host) {
  if (bind_host.empty() || bind_host == "0.0.0.0" || bind_host == "::" || bind_host == "[::]") {
    return "127.0.0.1";
  }
  return bind_host;
}

namespace {

// The lower-tier flags of a worker (none while kv_tiers.host_mb is 0). With kvstore daemons in
// the cluster, G4 follows the daemons registered with the router, as on Kubernetes: a daemon
// that restarts or is added is picked up without restarting the workers.
void AppendKvTierFlags(const ClusterConfig& c, const std::string& id, bool kvstores,
                       std::vector<std::string>& argv) {
  const auto& t = c.kv_tiers;
  if (t.host_mb == 0) return;
  argv.insert(argv.end(), {"--kv-host-mb", absl::StrCat(t.host_mb), "--kv-host-policy",
                           t.host_policy, "--kv-offload", t.offload, "--kv-staging-mb",
                           absl::StrCat(t.staging_mb)});
  if (t.disk_mb > 0) {
    argv.insert(argv.end(), {"--kv-disk-path", absl::StrCat(t.disk_path, "/", id), "--kv-disk-mb",
                             absl::StrCat(t.disk_mb), "--kv-disk-policy", t.disk_policy,
                             "--kv-disk-admit-uses", absl::StrCat(t.disk_admit_uses)});
  }
  if (kvstores) argv.push_back("--kv-remote-from-router");
}

// The cluster mTLS flags every process gets (none while tls is off).
void AppendTlsFlags(const ClusterConfig& c, std::vector<std::string>& argv) {
  if (c.tls.mode == "off" || c.tls.ca.empty()) return;
  argv.insert(argv.end(), {"--tls-ca", c.tls.ca, "--tls-cert", c.tls.cert, "--tls-key", c.tls.key});
}

ProcessSpec KvstoreSpec(const ClusterConfig& c, const std::string& exe, const std::string& id,
                        std::pair<int, int> ports, const std::string& log_dir,
                        const std::string& routers) {
  std::vector<std::string> argv = {exe,
                                   "kvstore",
                                   "--id",
                                   id,
                                   "--host",
                                   c.host,
                                   "--http-port",
                                   absl::StrCat(ports.first),
                                   "--port",
                                   absl::StrCat(ports.second),
                                   "--capacity-bytes",
                                   absl::StrCat(c.kv_tiers.kvstore_mb << 20),
                                   "--policy",
                                   c.kv_tiers.kvstore_policy,
                                   "--router",
                                   routers};
  AppendTlsFlags(c, argv);
  return ProcessSpec{id, std::move(argv),
                     absl::StrCat("http://", ConnectHost(c.host), ":", ports.first, "/health"),
                     absl::StrCat(log_dir, "/", id, ".log")};
}

// The OpenAI API flags the router and the mixed workers share, where not the defaults.
void AppendApiCompatFlags(const ClusterConfig& c, std::vector<std::string>& argv) {
  if (c.unknown_params != "warn") argv.insert(argv.end(), {"--unknown-params", c.unknown_params});
  if (c.get_load_format != "sglang") {
    argv.insert(argv.end(), {"--get-load-format", c.get_load_format});
  }
  if (c.tool_call_parser != "auto") {
    argv.insert(argv.end(), {"--tool-call-parser", c.tool_call_parser});
  }
  if (c.max_memory_mb != -1) {
    argv.insert(argv.end(), {"--max-memory-mb", absl::StrCat(c.max_memory_mb)});
  }
}

// The KV pool flags of one worker: blocks for every worker, else its MiB or memory share.
void AppendKvPoolFlags(const ClusterConfig& c, const WorkerPlacement& w,
                       std::vector<std::string>& argv) {
  if (c.engine.num_kv_blocks > 0) {
    argv.insert(argv.end(), {"--num-kv-blocks", absl::StrCat(c.engine.num_kv_blocks)});
  } else if (w.kv_cache_mb > 0) {
    argv.insert(argv.end(), {"--kv-cache-mb", absl::StrCat(w.kv_cache_mb)});
  } else if (w.memory_share > 0) {
    argv.insert(argv.end(), {"--gpu-memory-share", absl::StrCat(w.memory_share)});
  }
}

// The flags the router and every worker share: the cluster's block hash key, the API keys'
// default cache salts (used by the processes serving the API), hiding cached_tokens, and the
// API keys' rate limits.
void AppendTenantFlags(const ClusterConfig& c, std::vector<std::string>& argv) {
  if (!c.kv_hash_key_file.empty()) {
    argv.insert(argv.end(), {"--kv-hash-key-file", c.kv_hash_key_file});
  }
  for (size_t i = 0; i < c.api_key_cache_salts.size(); ++i) {
    if (c.api_key_cache_salts[i].empty()) continue;
    argv.insert(argv.end(),
                {"--api-key-cache-salt", absl::StrCat("key-", i, "=", c.api_key_cache_salts[i])});
  }
  if (c.hide_cached_tokens) argv.push_back("--hide-cached-tokens");
  if (!c.rate_limit.empty()) argv.insert(argv.end(), {"--rate-limit", c.rate_limit});
  for (size_t i = 0; i < c.api_key_rate_limits.size(); ++i) {
    if (c.api_key_rate_limits[i].empty()) continue;
    argv.insert(argv.end(), {"--api-key-rate-limit",
                             absl::StrCat("key-", i, "=", c.api_key_rate_limits[i])});
  }
}

// One worker of model `model` (its directory), which clients name `served_name`.
ProcessSpec WorkerSpec(const ClusterConfig& c, const std::string& exe, const std::string& model,
                       const std::string& served_name, const std::string& id,
                       const WorkerPlacement& w, std::pair<int, int> ports,
                       const std::string& log_dir, bool kvstores, const std::string& router) {
  const std::string role = w.role;
  std::vector<std::string> argv = {exe,
                                   "worker",
                                   "--role",
                                   role,
                                   "--id",
                                   id,
                                   "--host",
                                   c.host,
                                   "--http-port",
                                   absl::StrCat(ports.first),
                                   "--grpc-port",
                                   absl::StrCat(ports.second),
                                   "--router",
                                   router,
                                   "--model",
                                   model,
                                   "--served-model-name",
                                   served_name,
                                   "--plugin",
                                   c.engine.plugin,
                                   "--block-size",
                                   absl::StrCat(c.engine.block_size)};
  for (const auto& key : c.api_keys) argv.insert(argv.end(), {"--api-key", key});
  AppendApiCompatFlags(c, argv);
  AppendTenantFlags(c, argv);
  if (!w.plugin_config.empty()) argv.insert(argv.end(), {"--plugin-config", w.plugin_config});
  AppendKvPoolFlags(c, w, argv);
  argv.insert(argv.end(),
              {"--max-num-seqs", absl::StrCat(c.engine.max_num_seqs), "--max-num-batched-tokens",
               absl::StrCat(c.engine.max_num_batched_tokens)});
  if (c.engine.max_model_len > 0) {
    argv.insert(argv.end(), {"--max-model-len", absl::StrCat(c.engine.max_model_len)});
  }
  if (c.engine.kv_device_path != "auto") {
    argv.insert(argv.end(), {"--kv-device-path", c.engine.kv_device_path});
  }
  if (c.engine.stall_timeout_s != ClusterConfig::Engine{}.stall_timeout_s) {
    argv.insert(argv.end(), {"--engine-stall-timeout-s", absl::StrCat(c.engine.stall_timeout_s)});
  }
  if (c.engine.detached_request_grace_s != ClusterConfig::Engine{}.detached_request_grace_s) {
    argv.insert(argv.end(), {"--detached-request-grace-s",
                             absl::StrCat(c.engine.detached_request_grace_s)});
  }
  AppendKvTierFlags(c, id, kvstores, argv);
  AppendTlsFlags(c, argv);
  return ProcessSpec{id, std::move(argv),
                     absl::StrCat("http://", ConnectHost(c.host), ":", ports.first, "/ready"),
                     absl::StrCat(log_dir, "/", id, ".log")};
}

}  // namespace

namespace {

// One router's process: `name` serving HTTP on `http_port` and its registry on `grpc_port`.
ProcessSpec RouterSpec(const ClusterConfig& c, const std::string& exe, const std::string& model_dir,
                       const std::string& log_dir, const std::string& name, int http_port,
                       int grpc_port) {
  std::vector<std::string> argv = {exe,
                                   "router",
                                   "--host",
                                   c.host,
                                   "--http-port",
                                   absl::StrCat(http_port),
                                   "--grpc-port",
                                   absl::StrCat(grpc_port),
                                   "--model",
                                   model_dir,
                                   "--served-model-name",
                                   c.models.empty() ? ServedModelName(c.model) : c.models[0].name,
                                   "--policy",
                                   c.policy};
  // Further models: each with its name, its directory and its workers' profiles.
  for (size_t i = 1; i < c.models.size(); ++i) {
    argv.insert(argv.end(),
                {"--serve-model", absl::StrCat(c.models[i].name, "=", c.models[i].model)});
  }
  for (const ClusterConfig::ModelPool& m : c.models) {
    if (!m.profile.empty()) {
      argv.insert(argv.end(), {"--model-profile", absl::StrCat(m.name, "=", m.profile)});
    }
  }
  for (const auto& key : c.api_keys) argv.insert(argv.end(), {"--api-key", key});
  AppendApiCompatFlags(c, argv);
  AppendTenantFlags(c, argv);
  AppendTlsFlags(c, argv);
  if (c.engine.max_model_len > 0) {
    argv.insert(argv.end(), {"--max-model-len", absl::StrCat(c.engine.max_model_len)});
  }
  argv.insert(argv.end(),
              {"--slo-ttft", absl::StrCat(c.slo.ttft_s), "--slo-tpot", absl::StrCat(c.slo.tpot_s)});
  if (c.router.worker_stream_idle_timeout_s !=
      ClusterConfig::Router{}.worker_stream_idle_timeout_s) {
    argv.insert(argv.end(), {"--worker-stream-idle-timeout-s",
                             absl::StrCat(c.router.worker_stream_idle_timeout_s)});
  }
  if (c.router.max_inflight_per_worker != ClusterConfig::Router{}.max_inflight_per_worker) {
    argv.insert(argv.end(), {"--max-inflight-per-worker",
                             absl::StrCat(c.router.max_inflight_per_worker)});
  }
  if (c.router.resume_settle_s != ClusterConfig::Router{}.resume_settle_s) {
    argv.insert(argv.end(), {"--resume-settle-s", absl::StrCat(c.router.resume_settle_s)});
  }
  const ClusterConfig::Router::HttpTls& tls = c.router.http_tls;
  if (tls.mode != "off" && !tls.cert.empty()) {
    argv.insert(argv.end(), {"--http-tls-cert", tls.cert, "--http-tls-key", tls.key});
    if (!tls.client_ca.empty()) argv.insert(argv.end(), {"--http-tls-client-ca", tls.client_ca});
  }
  const std::string http =
      absl::StrCat(RouterScheme(c), "://", ConnectHost(c.host), ":", http_port);
  return ProcessSpec{name, std::move(argv), http + "/ready", absl::StrCat(log_dir, "/", name, ".log")};
}

}  // namespace

std::string RouterScheme(const ClusterConfig& config) {
  return config.router.http_tls.mode == "off" ? "http" : "https";
}

absl::StatusOr<ClusterPlan> PlanCluster(const ClusterConfig& c, const std::string& exe,
                                        const std::string& model_dir, const std::string& log_dir,
                                        const std::vector<std::pair<int, int>>& worker_ports,
                                        const std::vector<std::pair<int, int>>& router_ports) {
  ClusterPlan plan;
  const std::string host = ConnectHost(c.host);
  std::vector<std::string> registries;
  if (c.router.replicas <= 1) {
    plan.router.push_back(RouterSpec(c, exe, model_dir, log_dir, "router", c.router.http_port,
                                     c.router.grpc_port));
    registries.push_back(absl::StrCat(host, ":", c.router.grpc_port));
  } else {
    if (router_ports.size() != size_t(c.router.replicas)) {
      return absl::InvalidArgumentError(absl::StrCat("router.replicas is ", c.router.replicas,
                                                     " but ", router_ports.size(),
                                                     " router port pairs were given"));
    }
    for (int i = 0; i < c.router.replicas; ++i) {
      const auto [http_port, grpc_port] = router_ports[size_t(i)];
      plan.router.push_back(RouterSpec(c, exe, model_dir, log_dir, absl::StrCat("router-", i),
                                       http_port, grpc_port));
      registries.push_back(absl::StrCat(host, ":", grpc_port));
      plan.front_backends.push_back(absl::StrCat(host, ":", http_port));
    }
  }
  plan.url = absl::StrCat(RouterScheme(c), "://", host, ":", c.router.http_port, "/v1");
  const std::string routers = absl::StrJoin(registries, ",");
  // Every model's workers: ids <role>-<i>, or <model>-<role>-<i> with a models list (the
  // model's ModelProcessPrefix).
  struct Planned {
    std::string dir, served, id;
    const ClusterConfig* config;
    WorkerPlacement placement;
  };
  const std::vector<ClusterConfig> models = ModelPoolConfigs(c);
  std::vector<Planned> planned;
  for (size_t m = 0; m < models.size(); ++m) {
    absl::StatusOr<std::vector<WorkerPlacement>> placed = PlaceWorkers(models[m]);
    if (!placed.ok()) return placed.status();
    for (WorkerPlacement& w : *placed) {
      Planned p;
      p.config = &models[m];
      p.dir = c.models.empty() ? model_dir : c.models[m].model;
      p.served = c.models.empty() ? ServedModelName(c.model) : c.models[m].name;
      p.id = absl::StrCat(c.models.empty() ? "" : ModelProcessPrefix(c.models[m].name) + "-",
                          w.role, "-", w.index);
      p.placement = std::move(w);
      planned.push_back(std::move(p));
    }
  }
  const size_t workers = planned.size();
  for (int i = 0; i < c.kv_tiers.kvstore_count && workers + i < worker_ports.size(); ++i) {
    const auto ports = worker_ports[workers + i];
    plan.kvstores.push_back(
        KvstoreSpec(c, exe, absl::StrCat("kvstore-", i), ports, log_dir, routers));
  }
  const bool kvstores = !plan.kvstores.empty();
  for (size_t i = 0; i < planned.size() && i < worker_ports.size(); ++i) {
    const Planned& p = planned[i];
    plan.workers.push_back(WorkerSpec(*p.config, exe, p.dir, p.served, p.id, p.placement,
                                      worker_ports[i], log_dir, kvstores, routers));
  }
  return plan;
}

}  // namespace strata::cli
