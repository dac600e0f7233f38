#pragma once
// Selecting and reshaping a parsed trace before replay: a time window, a request cap, a
// speedup, and context clipping against the serving model's max_model_len.
//
// ApplyTraceOptions works in this order:
//   1. Window: keep requests with start_s <= arrival_s < start_s + duration_s (original trace
//      time). Kept arrivals are rebased to the window start: arrival_s -= start_s.
//   2. Clipping (when max_model_len > 0): a request fits when
//      input_tokens + output_tokens <= max_model_len.
//        kSkip           drops a request that does not fit (counted in `skipped`).
//        kTruncateInput  keeps the first max_model_len - output_tokens input tokens (the
//                        prefix, so prefix sharing survives), trims block_ids to
//                        ceil(new_input / 512) and clears `prompt` (its token count is no
//                        longer known); counted in `clipped`. A request whose output alone
//                        leaves no room for one input token (output_tokens >= max_model_len)
//                        cannot be truncated and is dropped (counted in `skipped`).
//   3. Max requests (when max_requests > 0): keep the first max_requests surviving requests.
//   4. Speedup: arrival_s /= speedup (2.0 replays twice as fast).
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/replay/trace.h"

namespace strata::replay {

enum class ClipPolicy { kSkip, kTruncateInput };

struct TraceOptions {
  double start_s = 0.0;                                         // >= 0.
  double duration_s = std::numeric_limits<double>::infinity();  // > 0; infinity = to the end.
  int64_t max_requests = 0;                                     // 0 = no cap; >= 0.
  double speedup = 1.0;                                         // > 0 and finite.
  int32_t max_model_len = 0;                                    // 0 = no clipping; >= 0.
  ClipPolicy clip_policy = ClipPolicy::kSkip;
};

struct TraceSummary {
  int64_t input_requests = 0;   // Requests given.
  int64_t outside_window = 0;   // Dropped by the window.
  int64_t clipped = 0;          // Input truncated (kTruncateInput).
  int64_t skipped = 0;          // Dropped for not fitting max_model_len.
  int64_t over_limit = 0;       // In-window requests after max_requests were already kept
                                // (not examined for clipping).
  int64_t output_requests = 0;  // Requests returned.
  int64_t input_tokens = 0;     // Sums over the returned requests.
  int64_t output_tokens = 0;
  double span_s = 0.0;  // Last returned arrival_s (after rebasing and speedup); 0 if none.
};

// InvalidArgument for out-of-range options. `summary` may be null.
absl::StatusOr<std::vector<TraceRequest>> ApplyTraceOptions(
    const std::vector<TraceRequest>& requests, const TraceOptions& options,
    TraceSummary* summary = nullptr);

}  // namespace strata::replay
