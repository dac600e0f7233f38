#pragma once
// Helpers shared by the trace parsers (internal to strata::replay).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "strata/replay/trace.h"

namespace strata::replay::internal {

inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// One physical line without its line end, and its 1-based number.
struct Line {
  absl::string_view text;
  int64_t number = 0;
};

// Splits on '\n', drops a trailing '\r' per line and skips whitespace-only lines.
std::vector<Line> NonBlankLines(absl::string_view text);

// InvalidArgument "<format> line N: <reason>".
absl::Status LineError(TraceFormat format, int64_t line, absl::string_view reason);

template <typename... Args>
absl::Status LineErrorf(TraceFormat format, int64_t line, const Args&... args) {
  return LineError(format, line, absl::StrCat(args...));
}

// Splits one CSV record; quoted fields may hold commas and "" escapes. Error text on failure.
absl::StatusOr<std::vector<std::string>> SplitCsvRecord(absl::string_view line);

// Whether `fields` (from the first line) are a header; InvalidArgument if the line looks like
// a header (first field does not start with a digit) but its names differ from `expected`.
absl::StatusOr<bool> CheckCsvHeader(TraceFormat format, const Line& line,
                                    const std::vector<std::string>& fields,
                                    const std::vector<absl::string_view>& expected);

// A token count: an integer in [0, 2^31). `what` names the field in the error.
absl::StatusOr<int32_t> ParseTokenCount(absl::string_view field, absl::string_view what);

// Non-decreasing arrival check shared by every format.
absl::Status CheckOrder(TraceFormat format, int64_t line, double previous_s, double arrival_s);

// Error unless ids.size() == ceil(input_tokens / kTraceBlockTokens).
absl::Status CheckBlockCount(TraceFormat format, int64_t line, size_t ids, int32_t input_tokens,
                             absl::string_view what);

}  // namespace strata::replay::internal
