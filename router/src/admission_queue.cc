#include "strata/router/admission_queue.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "strata/common/logging.h"
#include "strata/router/placement.h"

namespace strata::router {

const char* AdmissionRejectName(AdmissionReject reason) {
  switch (reason) {
    case AdmissionReject::kSlo: return "slo";
    case AdmissionReject::kQueueFull: return "queue_full";
    case AdmissionReject::kSlackExpired: return "slack_expired";
    case AdmissionReject::kShutdown: return "shutdown";
  }
  return "unknown";
}

absl::Status AdmissionRejectStatus(AdmissionReject reason, const absl::Status& placement_error) {
  const double retry = std::max(1.0, RetryAfterSeconds(placement_error).value_or(1.0));
  const std::string why = placement_error.ok()
                              ? std::string()
                              : absl::StrCat(" (", placement_error.message(), ")");
  absl::Status s = absl::ResourceExhaustedError(absl::StrFormat(
      "%s; retry after %gs%s",
      reason == AdmissionReject::kQueueFull
          ? "the admission queue is full"
          : "no worker could meet the SLO before this request's slack ran out",
      retry, why));
  s.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(retry)));
  return s;
}

AdmissionQueue::Ticket AdmissionQueue::Offer(double now, const absl::Status& placement_error,
                                             AdmissionWaiter waiter) {
  STRATA_CHECK(waiter.try_place && waiter.reject);
  const std::optional<double> min_ttft = MinTtftIfWaited(placement_error);
  std::optional<AdmissionReject> reason;
  absl::Status status = placement_error;
  Ticket ticket = kNoTicket;
  {
    absl::MutexLock lock(&mu_);
    latest_now_ = std::max(latest_now_, now);
    const double latest_start = waiter.deadline_s - min_ttft.value_or(0);
    if (!min_ttft.has_value() || latest_start < now || options_.capacity <= 0) {
      reason = AdmissionReject::kSlo;
    } else if (static_cast<int>(entries_.size()) >= options_.capacity) {
      reason = AdmissionReject::kQueueFull;
      status = AdmissionRejectStatus(*reason, placement_error);
    } else {
      ticket = next_ticket_++;
      order_.insert({latest_start, ticket});
      entries_[ticket] = Entry{std::move(waiter), now, latest_start};
      return ticket;
    }
  }
  Finish(waiter, -1, reason, status);
  return kNoTicket;
}

void AdmissionQueue::Wake(double now) {
  {
    absl::MutexLock lock(&mu_);
    latest_now_ = std::max(latest_now_, now);
    if (waking_) {
      rewake_ = true;  // the running Wake goes round once more
      return;
    }
    waking_ = true;
  }
  for (;;) {
    double at;
    {
      absl::MutexLock lock(&mu_);
      rewake_ = false;
      at = latest_now_;
    }
    Expire(at);
    RetryWaiting(at);
    absl::MutexLock lock(&mu_);
    if (!rewake_) {
      waking_ = false;
      return;
    }
  }
}

void AdmissionQueue::Expire(double now) {
  for (;;) {
    AdmissionWaiter waiter;
    double enqueued;
    {
      absl::MutexLock lock(&mu_);
      if (order_.empty() || order_.begin()->first >= now) return;
      std::tie(waiter, enqueued) = Take(order_.begin()->second);
    }
    const AdmissionReject reason = AdmissionReject::kSlackExpired;
    Finish(waiter, now - enqueued, reason, AdmissionRejectStatus(reason, absl::OkStatus()));
  }
}

void AdmissionQueue::RetryWaiting(double now) {
  // The order as it stands: entries re-queued during this pass are not tried twice.
  std::vector<Ticket> pass;
  {
    absl::MutexLock lock(&mu_);
    pass.reserve(order_.size());
    for (const Key& k : order_) pass.push_back(k.second);
  }
  int failures = 0;
  for (Ticket ticket : pass) {
    std::function<absl::Status()> try_place;
    {
      absl::MutexLock lock(&mu_);
      auto it = entries_.find(ticket);
      if (it == entries_.end() || it->second.trying) continue;  // removed meanwhile
      it->second.trying = true;
      order_.erase({it->second.latest_start_s, ticket});
      try_place = it->second.waiter.try_place;
    }
    const absl::Status placed = try_place();
    if (placed.ok()) {
      AdmissionWaiter waiter;
      double enqueued;
      {
        absl::MutexLock lock(&mu_);
        std::tie(waiter, enqueued) = Take(ticket);
      }
      Finish(waiter, now - enqueued, std::nullopt, absl::OkStatus());
      failures = 0;
      continue;
    }
    Requeue(ticket, now, placed);
    if (++failures >= std::max(1, options_.max_failures_per_wake)) return;
  }
}

bool AdmissionQueue::Requeue(Ticket ticket, double now, const absl::Status& error) {
  const std::optional<double> min_ttft = MinTtftIfWaited(error);
  AdmissionWaiter waiter;
  double enqueued;
  std::optional<AdmissionReject> reason;  // none: removed while it was tried, drop silently
  {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_.at(ticket);
    e.trying = false;
    if (!e.removed && min_ttft.has_value() && e.waiter.deadline_s - *min_ttft >= now) {
      e.latest_start_s = e.waiter.deadline_s - *min_ttft;
      order_.insert({e.latest_start_s, ticket});
      return true;
    }
    if (!e.removed) {
      reason = min_ttft.has_value() ? AdmissionReject::kSlackExpired : AdmissionReject::kSlo;
    }
    std::tie(waiter, enqueued) = Take(ticket);
  }
  const bool own_error = reason == AdmissionReject::kSlo;
  Finish(waiter, now - enqueued, reason,
         !reason || own_error ? error : AdmissionRejectStatus(*reason, error));
  return false;
}

bool AdmissionQueue::Remove(Ticket ticket) {
  AdmissionWaiter waiter;  // destroyed outside the lock (it may own the request's state)
  double enqueued, now;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(ticket);
    if (it == entries_.end() || it->second.removed) return false;
    if (it->second.trying) {
      it->second.removed = true;  // RetryWaiting drops it unless try_place placed it
      return true;
    }
    now = latest_now_;
    std::tie(waiter, enqueued) = Take(ticket);
  }
  Finish(waiter, std::max(0.0, now - enqueued), std::nullopt, absl::OkStatus());
  return true;
}

void AdmissionQueue::RejectAll(const absl::Status& status) {
  for (;;) {
    AdmissionWaiter waiter;
    double enqueued, now;
    {
      absl::MutexLock lock(&mu_);
      if (order_.empty()) return;
      now = latest_now_;
      std::tie(waiter, enqueued) = Take(order_.begin()->second);
    }
    Finish(waiter, std::max(0.0, now - enqueued), AdmissionReject::kShutdown, status);
  }
}

int AdmissionQueue::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(entries_.size());
}

std::optional<double> AdmissionQueue::NextExpiry() const {
  absl::MutexLock lock(&mu_);
  if (order_.empty()) return std::nullopt;
  return order_.begin()->first;
}

std::pair<AdmissionWaiter, double> AdmissionQueue::Take(Ticket ticket) {
  auto it = entries_.find(ticket);
  STRATA_CHECK(it != entries_.end());
  std::pair<AdmissionWaiter, double> out{std::move(it->second.waiter), it->second.enqueued_s};
  if (!it->second.trying) order_.erase({it->second.latest_start_s, ticket});
  entries_.erase(it);
  return out;
}

void AdmissionQueue::Finish(AdmissionWaiter& waiter, double waited_s,
                            std::optional<AdmissionReject> reason, const absl::Status& status) {
  if (observer_ != nullptr) {
    if (waited_s >= 0) observer_->OnLeft(waited_s);
    if (reason.has_value()) observer_->OnRejected(*reason);
  }
  if (reason.has_value()) waiter.reject(*reason, status);
}

}  // namespace strata::router
