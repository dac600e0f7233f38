#pragma once
// Admission by slack: requests that no placement can serve within their SLO *now*, but could
// after waiting for capacity, wait here instead of being rejected at once.
//
// A request enters only after a placement attempt failed with a status that says waiting can
// help (placement.h: MinTtftIfWaited, the TTFT predicted once capacity frees). Its slack is
//   slack(now) = deadline - (now + min_ttft)      deadline = arrival + its class's TTFT target,
// the time it can still wait and meet its TTFT. Waiting requests are kept least slack first and
// re-tried in that order whenever the caller reports that capacity changed (Wake: a request
// finished, a first token arrived, a heartbeat came; plus a periodic timer). Every request that
// enters ends in exactly one of:
//   - placed: its try_place callback returned OK (the callback has started it);
//   - rejected: its reject callback runs once, with a reason and the status to answer
//     (ResourceExhausted carrying kRetryAfterPayload, so HTTP 429 + Retry-After):
//       kSlo          waiting cannot meet the SLO (the placement error did not say it could),
//       kQueueFull    `capacity` requests are already waiting,
//       kSlackExpired its slack ran out while it waited,
//       kShutdown     RejectAll (the router is draining);
//   - removed: Remove(ticket) took it out (its client disconnected); no callback runs.
//
// Time is the caller's, in seconds on any monotonic clock (the router's steady clock, the
// simulator's simulated time), so the queue is deterministic given its calls: ties in slack go
// to the earlier ticket. capacity 0 turns queueing off (every failed request is rejected at once
// with kSlo, or the reason its status gives).
//
// Thread-safety: every method is thread-safe. Callbacks run on the calling thread, never under
// the queue's lock, so they may call back into the queue (Remove, Wake, Offer). A Wake that
// arrives while another thread is waking makes that one run once more instead of blocking.
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace strata::router {

struct AdmissionOptions {
  // Requests that may wait at once; 0: no queue (reject at once, the pre-queue behaviour).
  // Off by default: on the shipped profile and the Mooncake trace, requests placed from the
  // queue fill decode batches up to their TPOT limit and lower the goodput at 90% attainment
  // (docs/BENCHMARKS.md, "Cluster goodput by routing policy"); turn it on (e.g. 256) where a
  // late answer is worth more than a 429.
  int capacity = 0;
  // One Wake re-tries waiting requests in slack order until this many in a row failed to
  // place (bounds a wake's cost; the least-slack requests go first).
  int max_failures_per_wake = 8;
};

enum class AdmissionReject { kSlo, kQueueFull, kSlackExpired, kShutdown };
// "slo", "queue_full", "slack_expired", "shutdown" (metric labels).
const char* AdmissionRejectName(AdmissionReject reason);

// What the queue calls for one waiting request. Both are required.
struct AdmissionWaiter {
  // Absolute time by which the first token must arrive (arrival + the class's TTFT target).
  double deadline_s = 0;
  // Places and starts the request now: OK when placed, else the placement's error (waiting
  // continues while it still says waiting can help and slack remains).
  std::function<absl::Status()> try_place;
  // The request is given up; answer `status` (kSlo: the placement's own error).
  std::function<void(AdmissionReject reason, const absl::Status& status)> reject;
};

// Observes the queue (metrics). Called outside the queue's lock; may be null.
class AdmissionObserver {
 public:
  virtual ~AdmissionObserver() = default;
  // A request left the queue after `waited_s` (placed, rejected or removed).
  virtual void OnLeft(double waited_s) = 0;
  virtual void OnRejected(AdmissionReject reason) = 0;
};

class AdmissionQueue {
 public:
  using Ticket = uint64_t;
  static constexpr Ticket kNoTicket = 0;

  explicit AdmissionQueue(AdmissionOptions options, AdmissionObserver* observer = nullptr)
      : options_(options), observer_(observer) {}

  // A request whose placement just failed with `placement_error`. Queues it and returns its
  // ticket when waiting can meet its SLO (MinTtftIfWaited, within the deadline) and there is
  // room; otherwise rejects it at once (waiter.reject runs before Offer returns: kSlo with
  // `placement_error` when waiting cannot help or capacity is 0, else kQueueFull) and returns
  // kNoTicket.
  Ticket Offer(double now, const absl::Status& placement_error, AdmissionWaiter waiter);

  // Capacity may have changed: rejects requests whose slack ran out, then re-tries waiting
  // requests least slack first (see AdmissionOptions::max_failures_per_wake).
  void Wake(double now);

  // Takes a waiting request out without a callback (its client left). False when it is not
  // waiting (already placed, rejected or removed). For a request whose try_place is running
  // right now it returns true and drops the request when try_place fails; if try_place placed
  // it, the caller's own cancellation (which it set before calling Remove) must stop it.
  bool Remove(Ticket ticket);

  // Rejects every waiting request with kShutdown and `status` (the router drains).
  void RejectAll(const absl::Status& status);

  // Requests waiting now.
  int size() const;
  // The earliest time a waiting request's slack runs out (when a Wake would expire it), or
  // nullopt when none waits. The simulator schedules its timer event with it.
  std::optional<double> NextExpiry() const;
  const AdmissionOptions& options() const { return options_; }

 private:
  struct Entry {
    AdmissionWaiter waiter;
    double enqueued_s = 0;
    double latest_start_s = 0;  // deadline - min_ttft: slack(now) = latest_start - now
    bool trying = false;        // try_place is running (the entry is out of order_)
    bool removed = false;       // Remove() came while trying
  };
  using Key = std::pair<double, Ticket>;  // (latest start, ticket): least slack first

  void Expire(double now);
  // Re-tries entries in slack order; returns when the order is exhausted or enough failed.
  void RetryWaiting(double now);
  // After a failed try: re-queue, or reject (reason, status). Returns false if rejected.
  bool Requeue(Ticket ticket, double now, const absl::Status& error);
  // Removes the entry (lock held) and returns its waiter and queueing time.
  std::pair<AdmissionWaiter, double> Take(Ticket ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Observer calls, then the reject callback when `reason` is set. waited_s < 0: never queued.
  void Finish(AdmissionWaiter& waiter, double waited_s, std::optional<AdmissionReject> reason,
              const absl::Status& status);

  const AdmissionOptions options_;
  AdmissionObserver* const observer_;
  mutable absl::Mutex mu_;
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<Ticket, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::set<Key> order_ ABSL_GUARDED_BY(mu_);  // entries not being tried
  bool waking_ ABSL_GUARDED_BY(mu_) = false;
  bool rewake_ ABSL_GUARDED_BY(mu_) = false;
  double latest_now_ ABSL_GUARDED_BY(mu_) = 0;
};

// The status answered for a request the queue rejects (kQueueFull, kSlackExpired): a
// ResourceExhausted naming the reason, with kRetryAfterPayload (the placement's hint if it had
// one, else 1 s).
absl::Status AdmissionRejectStatus(AdmissionReject reason, const absl::Status& placement_error);

}  // namespace strata::router
