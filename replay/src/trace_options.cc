#include "strata/replay/trace_options.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace strata::replay {
namespace {

absl::Status ValidateOptions(const TraceOptions& o) {
  if (!std::isfinite(o.start_s) || o.start_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("start_s must be >= 0, got ", o.start_s));
  }
  if (std::isnan(o.duration_s) || o.duration_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("duration_s must be > 0, got ", o.duration_s));
  }
  if (o.max_requests < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_requests must be >= 0, got ", o.max_requests));
  }
  if (!std::isfinite(o.speedup) || o.speedup <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("speedup must be finite and > 0, got ", o.speedup));
  }
  if (o.max_model_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_model_len must be >= 0, got ", o.max_model_len));
  }
  return absl::OkStatus();
}

enum class Fit { kFits, kClipped, kSkipped };

// Applies the clip policy to `request` in place.
Fit Clip(TraceRequest& request, const TraceOptions& options) {
  const int64_t limit = options.max_model_len;
  if (limit == 0 || static_cast<int64_t>(request.input_tokens) + request.output_tokens <= limit) {
    return Fit::kFits;
  }
  if (options.clip_policy == ClipPolicy::kSkip || request.output_tokens >= limit) {
    return Fit::kSkipped;
  }
  request.input_tokens = static_cast<int32_t>(limit - request.output_tokens);
  if (!request.block_ids.empty()) {
    size_t blocks =
        (static_cast<size_t>(request.input_tokens) + kTraceBlockTokens - 1) / kTraceBlockTokens;
    request.block_ids.resize(std::min(blocks, request.block_ids.size()));
  }
  request.prompt.clear();
  return Fit::kClipped;
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ApplyTraceOptions(
    const std::vector<TraceRequest>& requests, const TraceOptions& options, TraceSummary* summary) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) return status;
  TraceSummary s{.input_requests = static_cast<int64_t>(requests.size())};
  const double end_s = options.start_s + options.duration_s;
  std::vector<TraceRequest> out;
  for (const TraceRequest& original : requests) {
    if (original.arrival_s < options.start_s || original.arrival_s >= end_s) {
      ++s.outside_window;
      continue;
    }
    if (options.max_requests > 0 && static_cast<int64_t>(out.size()) >= options.max_requests) {
      ++s.over_limit;
      continue;
    }
    TraceRequest request = original;
    Fit fit = Clip(request, options);
    if (fit == Fit::kSkipped) {
      ++s.skipped;
      continue;
    }
    s.clipped += fit == Fit::kClipped;
    request.arrival_s = (request.arrival_s - options.start_s) / options.speedup;
    s.input_tokens += request.input_tokens;
    s.output_tokens += request.output_tokens;
    s.span_s = request.arrival_s;
    out.push_back(std::move(request));
  }
  s.output_requests = static_cast<int64_t>(out.size());
  if (summary != nullptr) *summary = s;
  return out;
}

}  // namespace strata::replay
