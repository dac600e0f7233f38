#pragma once
// Per-API-key rate limits: requests per minute and tokens per minute, each a token bucket that
// holds at most one minute's allowance and refills continuously. A request is admitted only when
// both buckets hold enough: one request, and its token charge (prompt tokens plus the output
// budget, max_tokens, of every choice). When it finishes, what it did not use (max_tokens beyond
// the tokens it generated) goes back to the key's bucket, so long max_tokens cost only while the
// request runs. A refused request gets the seconds until it would be admitted (429 with
// Retry-After); one whose charge is above the whole minute's allowance can never be, and is told
// so.
//
// Limits are per process: each router (and each standalone mixed worker) keeps its own buckets.
//
// Thread-safety: every method may be called from any thread.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "strata/common/rate_limit.h"

namespace strata::openai {

using ::strata::RateLimit;

class RateLimiter {
 public:
  // The outcome of one admission: admitted, or refused with the wait before a retry can be
  // admitted (never, when `exceeds_allowance`).
  struct Decision {
    bool admitted = true;
    double retry_after_s = 0;
    bool exceeds_allowance = false;  // the charge is above the key's whole per-minute allowance
    std::string reason;              // for the client: which limit, and its value
  };

  // `per_key[i]`: the limit of API key i (nullopt: `default_limit`); requests without a key
  // (auth off) share one bucket with `default_limit`. `now` is the clock (tests pass their own).
  RateLimiter(RateLimit default_limit, std::vector<std::optional<RateLimit>> per_key,
              std::function<absl::Time()> now = absl::Now);

  // True when no key has a limit (Admit always admits; callers may skip it).
  bool unlimited() const { return unlimited_; }

  // Charges one request and `tokens` to key `key_index` (-1: no key) if both buckets allow it.
  Decision Admit(int key_index, int64_t tokens);
  // Returns `tokens` a finished request did not use to the key's token bucket.
  void Refund(int key_index, int64_t tokens);

 private:
  struct Bucket {
    double level = 0;  // starts full (set in the constructor)
    absl::Time refilled;
  };
  struct Key {
    RateLimit limit;
    Bucket requests, tokens;
  };
  static void Refill(Bucket& b, double per_minute, absl::Time now);
  Key* KeyFor(int key_index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::function<absl::Time()> now_;
  bool unlimited_ = true;
  absl::Mutex mu_;
  std::vector<Key> keys_ ABSL_GUARDED_BY(mu_);  // [0]: no key; [i + 1]: API key i
};

}  // namespace strata::openai
