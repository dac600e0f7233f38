#pragma once
// Keeps a process registered with the router's Registry (strata.proto): registers (retrying
// while the router is not up), then heartbeats at once and every `interval` after with the
// process's load and the KV events since the last beat. When the router answers that it does not know the process (it
// restarted, or dropped it after missed beats), registers again and resyncs its events.
//
// What is reported comes from hooks, so workers (engine load, device-tier events) and
// `strata kvstore` daemons (no load, remote-tier events) share one client:
//   load         the load to report; null: an empty WorkerLoad
//   take_events  KV events since the previous call, in order (called on the client's thread)
//   resync       called after every successful (re-)registration: the router's index of this
//                process starts empty, so the next take_events must describe everything held
//   kvstores     the kvstore daemons registered with the router (their KvStore addresses,
//                sorted), after every successful registration and accepted heartbeat
// Events a heartbeat could not deliver are kept and resent (bounded).
//
// Thread-safety: Start/Stop from one owner thread; registered() from any thread. The hooks run
// on the client's own thread.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

class RegistryClient {
 public:
  RegistryClient(std::string router_address, v1::WorkerInfo info, RegistryHooks hooks,
                 absl::Duration interval);
  ~RegistryClient();  // Stop()
  RegistryClient(const RegistryClient&) = delete;
  RegistryClient& operator=(const RegistryClient&) = delete;

  void Start();
  bool registered() const { return registered_.load(); }
  // Deregisters (best effort) and stops heartbeating. Idempotent.
  void Stop();

 private:
  void Run();
  bool Register();
  bool Beat();

  v1::WorkerInfo info_;
  RegistryHooks hooks_;
  absl::Duration interval_;
  std::unique_ptr<v1::Registry::Stub> stub_;
  std::atomic<bool> registered_{false};
  uint64_t epoch_ = 0;
  std::vector<v1::KvEvent> unsent_;  // events a failed heartbeat could not deliver
  // The last registration failure logged: a refusal repeats on every retry, and is logged
  // once until the reason changes or registration succeeds. Run thread only.
  std::string last_register_error_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata::proto
