#include "strata/openai/rate_limit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace strata::openai {

RateLimiter::RateLimiter(RateLimit default_limit, std::vector<std::optional<RateLimit>> per_key,
                         std::function<absl::Time()> now)
    : now_(std::move(now)) {
  const absl::Time start = now_();
  auto make = [&](const RateLimit& limit) {
    Key k;
    k.limit = limit;
    k.requests = {limit.requests_per_minute, start};
    k.tokens = {limit.tokens_per_minute, start};
    unlimited_ = unlimited_ && limit.unlimited();
    return k;
  };
  absl::MutexLock lock(&mu_);
  keys_.push_back(make(default_limit));
  for (const std::optional<RateLimit>& limit : per_key) {
    keys_.push_back(make(limit.value_or(default_limit)));
  }
}

void RateLimiter::Refill(Bucket& b, double per_minute, absl::Time now) {
  if (now > b.refilled) {
    b.level = std::min(per_minute, b.level + per_minute * absl::ToDoubleMinutes(now - b.refilled));
    b.refilled = now;
  }
}

RateLimiter::Key* RateLimiter::KeyFor(int key_index) {
  const size_t slot = key_index < 0 ? 0 : size_t(key_index) + 1;
  return slot < keys_.size() ? &keys_[slot] : &keys_[0];
}

RateLimiter::Decision RateLimiter::Admit(int key_index, int64_t tokens) {
  Decision d;
  if (unlimited_) return d;
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  Key& k = *KeyFor(key_index);
  const double rpm = k.limit.requests_per_minute, tpm = k.limit.tokens_per_minute;
  double wait_s = 0;
  if (rpm > 0) {
    Refill(k.requests, rpm, now);
    if (k.requests.level < 1) {
      wait_s = (1 - k.requests.level) / rpm * 60;
      d.reason = absl::StrFormat("requests per minute (limit %g)", rpm);
    }
  }
  if (tpm > 0) {
    Refill(k.tokens, tpm, now);
    if (double(tokens) > tpm) {
      d.admitted = false;
      d.exceeds_allowance = true;
      d.reason = absl::StrFormat(
          "the request needs %d tokens (prompt and max_tokens of every choice), above the "
          "tokens-per-minute limit %g: lower max_tokens",
          tokens, tpm);
      return d;
    }
    if (k.tokens.level < double(tokens)) {
      const double token_wait_s = (double(tokens) - k.tokens.level) / tpm * 60;
      if (token_wait_s > wait_s) {
        wait_s = token_wait_s;
        d.reason = absl::StrFormat("tokens per minute (limit %g, this request needs %d)", tpm,
                                   tokens);
      }
    }
  }
  if (wait_s > 0) {
    d.admitted = false;
    d.retry_after_s = wait_s;
    return d;
  }
  if (rpm > 0) k.requests.level -= 1;
  if (tpm > 0) k.tokens.level -= double(tokens);
  return d;
}

void RateLimiter::Refund(int key_index, int64_t tokens) {
  if (unlimited_ || tokens <= 0) return;
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  Key& k = *KeyFor(key_index);
  if (k.limit.tokens_per_minute <= 0) return;
  Refill(k.tokens, k.limit.tokens_per_minute, now);
  k.tokens.level = std::min(k.limit.tokens_per_minute, k.tokens.level + double(tokens));
}

}  // namespace strata::openai
