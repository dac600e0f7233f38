#include "strata/proto/registry_client.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "strata/common/logging.h"
#include "strata/proto/cluster_tls.h"

namespace strata::proto {
namespace {

constexpr size_t kMaxUnsentEvents = 1 << 20;  // beyond this the router's view is rebuilt anyway
constexpr auto kRpcTimeout = std::chrono::seconds(2);
// Heartbeats in a row a router may fail to answer before its link drops its queued events (it
// is resynced when it answers again), so a dead router's queue does not grow for as long as it
// stays dead.
constexpr int kMaxFailedBeats = 3;
constexpr size_t kMaxTargets = 64;

// host:port with a non-empty host and a port in 1..65535; "[v6]:port" too.
absl::Status CheckHostPort(absl::string_view entry) {
  const size_t colon = entry.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(entry.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("router address '", entry, "' is not host:port"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SplitList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    if (auto s = CheckHostPort(part); !s.ok()) return s;
    out.emplace_back(part);
  }
  return out;
}

// Every address `host_port`'s host resolves to, as "ip:port" ("[ip]:port" for IPv6), sorted;
// an error when it resolves to none.
absl::StatusOr<std::vector<std::string>> Resolve(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("resolving ", host_port, ": ", gai_strerror(rc)));
  }
  std::set<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char ip[NI_MAXHOST];
    if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST) != 0) {
      continue;
    }
    out.insert(a->ai_family == AF_INET6 ? absl::StrCat("[", ip, "]:", port)
                                        : absl::StrCat(ip, ":", port));
  }
  freeaddrinfo(res);
  if (out.empty()) return absl::UnavailableError(absl::StrCat(host_port, " has no address"));
  return std::vector<std::string>(out.begin(), out.end());
}

}  // namespace

absl::StatusOr<RouterTargets> RouterTargets::Parse(absl::string_view addresses,
                                                   absl::string_view services) {
  RouterTargets t;
  auto a = SplitList(addresses);
  if (!a.ok()) return a.status();
  auto s = SplitList(services);
  if (!s.ok()) return s.status();
  if (a->size() + s->size() > kMaxTargets) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxTargets, " router addresses and services"));
  }
  t.addresses = std::move(*a);
  t.services = std::move(*s);
  return t;
}

// One router: its channel, its registration and the events not yet delivered to it. The
// registration state is read from any thread; the rest belongs to the link's thread, except
// `queue`, `kvstores` and `needs_resync`, which the client's mutex guards.
struct RegistryClient::Link {
  explicit Link(std::string a)
      : address(std::move(a)), stub(v1::Registry::NewStub(MakeChannel(address))) {}

  const std::string address;
  std::unique_ptr<v1::Registry::Stub> stub;
  std::atomic<bool> registered{false};
  uint64_t epoch = 0;
  int failed_beats = 0;
  // The last registration failure logged: a refusal repeats on every retry, and is logged
  // once until the reason changes or registration succeeds.
  std::string last_register_error;
  std::vector<v1::KvEvent> queue;
  std::vector<std::string> kvstores;
  bool overflowed = false;  // the queue passed its bound: re-register (and resync)
  absl::Notification stop;
  std::thread thread;
};

RegistryClient::RegistryClient(RouterTargets routers, v1::WorkerInfo info, RegistryHooks hooks,
                               absl::Duration interval)
    : targets_(std::move(routers)),
      info_(std::move(info)),
      hooks_(std::move(hooks)),
      interval_(interval) {}

RegistryClient::~RegistryClient() { Stop(); }

void RegistryClient::Start() {
  // The fixed addresses are linked at once (a worker's first registration does not wait for the
  // manager thread); services are resolved there.
  UpdateLinks(targets_.addresses);
  manager_ = std::thread([this] { Manage(); });
}

int RegistryClient::registered_routers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [address, link] : links_) n += link->registered.load() ? 1 : 0;
  return n;
}

std::vector<std::string> RegistryClient::routers() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [address, link] : links_) out.push_back(address);
  return out;
}

void RegistryClient::Stop() {
  if (!manager_.joinable()) return;
  stop_.Notify();
  manager_.join();
  std::map<std::string, std::unique_ptr<Link>> links;
  {
    absl::MutexLock lock(&mu_);
    links.swap(links_);
  }
  // Every link deregisters on its own thread as it stops, so a dead router delays none of the
  // others.
  for (auto& [address, link] : links) link->stop.Notify();
  for (auto& [address, link] : links) link->thread.join();
}

void RegistryClient::Manage() {
  if (targets_.services.empty()) return;  // the fixed links never change
  for (;;) {
    std::set<std::string> wanted(targets_.addresses.begin(), targets_.addresses.end());
    for (const std::string& service : targets_.services) {
      absl::StatusOr<std::vector<std::string>> found = Resolve(service);
      if (found.ok()) {
        resolved_[service] = *std::move(found);
      } else if (!resolved_.contains(service)) {
        STRATA_LOG(Warning) << "router service " << service << ": " << found.status().message();
      }
      for (const std::string& a : resolved_[service]) wanted.insert(a);
    }
    UpdateLinks({wanted.begin(), wanted.end()});
    if (stop_.WaitForNotificationWithTimeout(targets_.resolve_interval)) return;
  }
}

void RegistryClient::UpdateLinks(const std::vector<std::string>& wanted) {
  std::vector<std::unique_ptr<Link>> gone;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = links_.begin(); it != links_.end();) {
      if (std::find(wanted.begin(), wanted.end(), it->first) == wanted.end()) {
        gone.push_back(std::move(it->second));
        it = links_.erase(it);
      } else {
        ++it;
      }
    }
    for (const std::string& address : wanted) {
      if (links_.contains(address)) continue;
      auto link = std::make_unique<Link>(address);
      Link* raw = link.get();
      links_.emplace(address, std::move(link));
      raw->thread = std::thread([this, raw] { RunLink(*raw); });
    }
  }
  for (auto& link : gone) {
    // No longer listed (scaled away or replaced): stop beating it; it drops this process after
    // missed heartbeats if it is still up.
    STRATA_LOG(Info) << "router " << link->address << " is no longer listed";
    link->registered = false;  // no deregistration: the listing may come back
    link->stop.Notify();
    link->thread.join();
  }
  if (!gone.empty()) ReportKvstores();
}

void RegistryClient::RunLink(Link& link) {
  while (!link.stop.HasBeenNotified()) {
    // A registration carries no load: a heartbeat follows at once, so the router never sees a
    // (re-)registered worker as idle for an interval it is not (e.g. with its engine stalled).
    const bool ok = link.registered.load() ? Beat(link) : Register(link) && Beat(link);
    if (!ok) link.registered = false;
    link.stop.WaitForNotificationWithTimeout(interval_);
  }
  if (!link.registered.exchange(false)) return;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::DeregisterRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_worker_id(info_.id());
  v1::DeregisterResponse resp;
  (void)link.stub->Deregister(&ctx, req, &resp);
}

bool RegistryClient::Register(Link& link) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::RegisterRequest req;
  req.set_protocol_version(kProtocolVersion);
  *req.mutable_worker() = info_;
  v1::RegisterResponse resp;
  grpc::Status s = link.stub->Register(&ctx, req, &resp);
  if (!s.ok()) {
    if (s.error_message() != link.last_register_error) {
      link.last_register_error = s.error_message();
      // A handshake between mTLS and plaintext, or with a certificate of another CA, fails as
      // UNAVAILABLE with transport words only: name the likely cause.
      const std::string hint =
          s.error_code() == grpc::StatusCode::UNAVAILABLE
              ? absl::StrCat(" (is it up, and does it use the same cluster gRPC security? this "
                             "process: ", GetClusterCredentials()->tls() ? "mTLS" : "plaintext",
                             ")")
              : "";
      STRATA_LOG(Warning) << "registering with the router at " << link.address
                          << " failed: " << s.error_message() << hint;
    }
    return false;
  }
  link.last_register_error.clear();
  link.epoch = resp.epoch();
  link.failed_beats = 0;
  {
    absl::MutexLock lock(&mu_);
    // This router's index of our blocks starts empty: the resync resends everything held now
    // (to every router, each replacing what it had), and what was queued for it is moot.
    link.queue.clear();
    link.overflowed = false;
    link.kvstores.assign(resp.kvstore_addresses().begin(), resp.kvstore_addresses().end());
    if (hooks_.resync) hooks_.resync();
    link.registered = true;
  }
  STRATA_LOG(Info) << "registered with the router at " << link.address << " as " << info_.id();
  ReportKvstores();
  return true;
}

std::optional<std::vector<v1::KvEvent>> RegistryClient::TakeFor(Link& link) {
  absl::MutexLock lock(&mu_);
  if (hooks_.take_events) {
    std::vector<v1::KvEvent> events = hooks_.take_events();
    if (!events.empty()) {
      for (auto& [address, other] : links_) {
        if (!other->registered.load() || other->overflowed) continue;  // resynced on registering
        if (other->queue.size() + events.size() > kMaxUnsentEvents) {
          other->overflowed = true;
          other->queue.clear();
          continue;
        }
        other->queue.insert(other->queue.end(), events.begin(), events.end());
      }
    }
  }
  if (link.overflowed) return std::nullopt;
  std::vector<v1::KvEvent> out;
  out.swap(link.queue);
  return out;
}

bool RegistryClient::Beat(Link& link) {
  std::optional<std::vector<v1::KvEvent>> taken = TakeFor(link);
  if (!taken) return false;  // the queue overflowed: re-register, and the router's index is rebuilt
  std::vector<v1::KvEvent> events = *std::move(taken);
  v1::HeartbeatRequest req;
  req.set_protocol_version(kProtocolVersion);
  req.set_worker_id(info_.id());
  req.set_epoch(link.epoch);
  if (hooks_.load) {
    absl::MutexLock lock(&mu_);
    *req.mutable_load() = hooks_.load();
  }
  req.mutable_events()->Assign(events.begin(), events.end());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
  v1::HeartbeatResponse resp;
  grpc::Status s = link.stub->Heartbeat(&ctx, req, &resp);
  if (!s.ok()) {
    // The router may be briefly busy or restarting: keep the events (ahead of newer ones), up to
    // a few missed beats.
    if (++link.failed_beats >= kMaxFailedBeats) return false;
    absl::MutexLock lock(&mu_);
    events.insert(events.end(), std::make_move_iterator(link.queue.begin()),
                  std::make_move_iterator(link.queue.end()));
    link.queue = std::move(events);
    return true;
  }
  link.failed_beats = 0;
  if (resp.reregister()) return false;
  {
    absl::MutexLock lock(&mu_);
    link.kvstores.assign(resp.kvstore_addresses().begin(), resp.kvstore_addresses().end());
  }
  ReportKvstores();
  return true;
}

void RegistryClient::ReportKvstores() {
  if (!hooks_.kvstores) return;
  absl::MutexLock lock(&mu_);
  std::set<std::string> all;
  for (const auto& [address, link] : links_) {
    if (link->registered.load()) all.insert(link->kvstores.begin(), link->kvstores.end());
  }
  hooks_.kvstores({all.begin(), all.end()});
}

}  // namespace strata::proto
