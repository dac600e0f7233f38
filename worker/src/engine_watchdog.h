#pragma once
// Tells whether the worker's engine is stalled: it has work (running or waiting requests, or
// posted closures) and has completed no step or closure for longer than `limit`
// (EngineLoop::StallAge). A stalled worker answers 503 on /health and /ready, reports `stalled`
// in its heartbeats' load (the router places nothing on it; it stays registered, so its KV
// index survives and placement resumes the moment a step completes), and exports
// strata_worker_engine_stalled. The state is computed from the loop on every question; a
// thread polls it only to log each change once (stalled, progressing again).
//
// Thread-safety: every method is thread-safe.
#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "strata/engine/engine_loop.h"

namespace strata::worker {

class EngineWatchdog {
 public:
  // `loop` outlives the watchdog. `limit` <= 0: never stalled (and no thread).
  EngineWatchdog(const EngineLoop* loop, absl::Duration limit);
  ~EngineWatchdog();

  // The engine's time without progress while it has work (zero while idle).
  absl::Duration Age() const { return loop_->StallAge(); }
  bool Stalled() const { return limit_ > absl::ZeroDuration() && Age() > limit_; }
  // A sentence for /health and logs when stalled; nullopt otherwise.
  std::optional<std::string> Describe() const;
  absl::Duration limit() const { return limit_; }

 private:
  void Poll();

  const EngineLoop* loop_;
  const absl::Duration limit_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace strata::worker
