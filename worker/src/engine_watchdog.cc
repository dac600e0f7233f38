#include "engine_watchdog.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "strata/common/logging.h"

namespace strata::worker {

EngineWatchdog::EngineWatchdog(const EngineLoop* loop, absl::Duration limit)
    : loop_(loop), limit_(limit) {
  if (limit_ > absl::ZeroDuration()) thread_ = std::thread([this] { Poll(); });
}

EngineWatchdog::~EngineWatchdog() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::string> EngineWatchdog::Describe() const {
  const absl::Duration age = Age();
  if (limit_ <= absl::ZeroDuration() || age <= limit_) return std::nullopt;
  const EngineLoad l = loop_->load();
  return absl::StrFormat(
      "engine stalled: no step completed for %.1f s (limit %.1f s) with %d running and %d "
      "waiting requests",
      absl::ToDoubleSeconds(age), absl::ToDoubleSeconds(limit_), l.running, l.waiting);
}

void EngineWatchdog::Poll() {
  // A tenth of the limit, between 10 ms and 1 s: the log trails the state by at most that.
  const absl::Duration period = std::clamp(limit_ / 10, absl::Milliseconds(10), absl::Seconds(1));
  bool stalled = false;
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const std::optional<std::string> problem = Describe();
    if (problem.has_value() && !stalled) {
      STRATA_LOG(Error) << *problem << "; /health answers 503 and the router places nothing here";
    } else if (!problem.has_value() && stalled) {
      STRATA_LOG(Info) << "engine progressing again: /health answers 200";
    }
    stalled = problem.has_value();
  }
}

}  // namespace strata::worker
