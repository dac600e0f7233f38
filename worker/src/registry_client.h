#pragma once
// Keeps a worker registered with the router: registers (retrying while the router is not up),
// then heartbeats with the engine's load and the KV cache events since the last beat. When the
// router answers that it does not know the worker (it restarted), registers again.
#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "strata/engine/engine_loop.h"
#include "strata/proto/protocol.h"

namespace strata::worker {

class RegistryClient {
 public:
  RegistryClient(std::string router_address, v1::WorkerInfo info, EngineLoop* loop,
                 absl::Duration interval);
  ~RegistryClient();  // Stop()

  void Start();
  bool registered() const { return registered_.load(); }
  // Deregisters (best effort) and stops heartbeating.
  void Stop();

 private:
  void Run();
  bool Register();
  bool Beat();

  v1::WorkerInfo info_;
  EngineLoop* loop_;
  absl::Duration interval_;
  std::unique_ptr<v1::Registry::Stub> stub_;
  std::atomic<bool> registered_{false};
  uint64_t epoch_ = 0;
  std::vector<v1::KvEvent> unsent_;  // events a failed heartbeat could not deliver
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata::worker
