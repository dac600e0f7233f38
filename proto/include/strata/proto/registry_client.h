#pragma once
// Keeps a process registered with every router's Registry (strata.proto): with each router it
// registers (retrying while that router is not up), then heartbeats at once and every `interval`
// after with the process's load and the KV events since the last beat. When a router answers that
// it does not know the process (it restarted, or dropped it after missed beats), registers with
// it again and resyncs.
//
// Several routers: each router has its own link (a thread, a channel, its own registration and
// a queue of events not yet delivered to it). The process's KV events are drained once and
// appended to every registered link's queue, so each router's index is complete on its own.
// A (re-)registration with any router resyncs the one event stream: it then starts with a
// CLEARED event per tier followed by the full contents, which replaces (not merges into) what
// every router had indexed for this process. Routers come from a fixed list and from DNS names
// whose every address is a router (a Kubernetes headless Service), re-resolved as they change.
//
// What is reported comes from hooks, so workers (engine load, device-tier events) and
// `strata kvstore` daemons (no load, remote-tier events) share one client:
//   load         the load to report; null: an empty WorkerLoad
//   take_events  KV events since the previous call, in order
//   resync       called after every successful (re-)registration: the next take_events must
//                start with CLEARED for each reported tier and then describe everything held
//   kvstores     the kvstore daemons registered with the routers (their KvStore addresses, the
//                union over the routers this process is registered with, sorted), after every
//                successful registration and accepted heartbeat
// Events a heartbeat could not deliver are kept and resent (bounded); a router that misses
// several heartbeats in a row loses its queue and is resynced when it answers again.
//
// Thread-safety: Start/Stop from one owner thread; registered(), registered_routers() and
// routers() from any thread. The hooks run on the client's threads, one at a time.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "strata/proto/protocol.h"

namespace strata::proto {

struct RegistryHooks {
  std::function<v1::WorkerLoad()> load;
  std::function<std::vector<v1::KvEvent>()> take_events;
  std::function<void()> resync;
  std::function<void(std::vector<std::string>)> kvstores;
};

// The routers a process registers with.
struct RouterTargets {
  // Registry addresses (host:port), each one router.
  std::vector<std::string> addresses;
  // host:port whose host name resolves to every router (e.g. a headless Service): each address
  // it resolves to is one router. Re-resolved every `resolve_interval`; a failed resolution
  // keeps the routers it found before.
  std::vector<std::string> services;
  absl::Duration resolve_interval = absl::Seconds(5);

  bool empty() const { return addresses.empty() && services.empty(); }

  // From comma-separated lists of host:port (either may be empty). kInvalidArgument, naming the
  // bad entry, for an entry that is not host:port with a port in 1..65535, or for more than 64
  // entries.
  static absl::StatusOr<RouterTargets> Parse(absl::string_view addresses,
                                             absl::string_view services);
};

class RegistryClient {
 public:
  RegistryClient(RouterTargets routers, v1::WorkerInfo info, RegistryHooks hooks,
                 absl::Duration interval);
  ~RegistryClient();  // Stop()
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  void Start();
  // Registered with at least one router.
  bool registered() const { return registered_routers() > 0; }
  int registered_routers() const;
  // The routers' addresses this client keeps links to now, sorted.
  std::vector<std::string> routers() const;
  // Deregisters from every router (best effort, in parallel) and stops heartbeating. Idempotent.
  void Stop();

 private:
  struct Link;

  void Manage();
  void UpdateLinks(const std::vector<std::string>& wanted);
  void RunLink(Link& link);
  bool Register(Link& link);
  bool Beat(Link& link);
  // Drains the hooks' events into every registered link's queue; returns `link`'s queue, or
  // nullopt when it overflowed (the link must register again).
  std::optional<std::vector<v1::KvEvent>> TakeFor(Link& link);
  void ReportKvstores();

  RouterTargets targets_;
  v1::WorkerInfo info_;
  RegistryHooks hooks_;
  absl::Duration interval_;

  // Guards the links, their queues and kvstore lists, and every hook call (hooks run one at a
  // time, so events are drained and fanned out in one order).
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  // The addresses each service resolved to last (kept while resolution fails).
  std::map<std::string, std::vector<std::string>> resolved_;  // manager thread only

  absl::Notification stop_;
  std::thread manager_;
};

}  // namespace strata::proto
