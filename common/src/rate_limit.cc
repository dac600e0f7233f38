#include "strata/common/rate_limit.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata {

absl::StatusOr<RateLimit> ParseRateLimit(absl::string_view spec) {
  RateLimit out;
  if (absl::StripAsciiWhitespace(spec).empty()) {
    return absl::InvalidArgumentError("a rate limit needs rpm:N and/or tpm:N");
  }
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t colon = part.find(':');
    double value = 0;
    const absl::string_view name = part.substr(0, colon);
    if (colon == absl::string_view::npos || !absl::SimpleAtod(part.substr(colon + 1), &value) ||
        !(value > 0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rate limit part '", part, "' is not rpm:N or tpm:N with a number N > 0"));
    }
    if (name == "rpm") {
      out.requests_per_minute = value;
    } else if (name == "tpm") {
      out.tokens_per_minute = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("rate limit part '", part, "': unknown limit '", name, "' (rpm, tpm)"));
    }
  }
  return out;
}

}  // namespace strata
