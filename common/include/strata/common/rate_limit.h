#pragma once
// A requests/tokens-per-minute limit as operators write it ("rpm:600,tpm:200000"), shared by
// the cluster config and the API servers' flags. openai::RateLimiter enforces it.
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strata {

struct RateLimit {
  double requests_per_minute = 0;  // 0: no limit
  double tokens_per_minute = 0;    // 0: no limit
  bool unlimited() const { return requests_per_minute <= 0 && tokens_per_minute <= 0; }
};

// "rpm:N", "tpm:N" or "rpm:N,tpm:M" (N, M > 0); InvalidArgument naming the bad part.
absl::StatusOr<RateLimit> ParseRateLimit(absl::string_view spec);

}  // namespace strata
