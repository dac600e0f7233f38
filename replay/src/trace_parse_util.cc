#include "trace_parse_util.h"

#include <cctype>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace strata::replay::internal {

std::vector<Line> NonBlankLines(absl::string_view text) {
  std::vector<Line> lines;
  int64_t number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!absl::StripAsciiWhitespace(line).empty()) lines.push_back({line, number});
    pos = end + 1;
  }
  return lines;
}

absl::Status LineError(TraceFormat format, int64_t line, absl::string_view reason) {
  return absl::InvalidArgumentError(
      absl::StrCat(Sv(TraceFormatName(format)), " line ", line, ": ", reason));
}

absl::StatusOr<std::vector<std::string>> SplitCsvRecord(absl::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c != '"') {
        fields.back().push_back(c);
      } else if (i + 1 < line.size() && line[i + 1] == '"') {
        fields.back().push_back('"');
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  if (quoted) return absl::InvalidArgumentError("unterminated quoted field");
  return fields;
}

absl::StatusOr<bool> CheckCsvHeader(TraceFormat format, const Line& line,
                                    const std::vector<std::string>& fields,
                                    const std::vector<absl::string_view>& expected) {
  absl::string_view first = absl::StripLeadingAsciiWhitespace(fields.front());
  if (!first.empty() && absl::ascii_isdigit(static_cast<unsigned char>(first.front()))) {
    return false;
  }
  bool match = fields.size() == expected.size();
  for (size_t i = 0; match && i < fields.size(); ++i) {
    match = absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(fields[i]), expected[i]);
  }
  if (!match) {
    return LineErrorf(format, line.number, "unexpected header \"", line.text, "\" (expected \"",
                      absl::StrJoin(expected, ","), "\")");
  }
  return true;
}

absl::StatusOr<int32_t> ParseTokenCount(absl::string_view field, absl::string_view what) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(field), &value)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", field, "\" is not an integer"));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is negative (", value, ")"));
  }
  if (value > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is too large (", value, ")"));
  }
  return static_cast<int32_t>(value);
}

absl::Status CheckOrder(TraceFormat format, int64_t line, double previous_s, double arrival_s) {
  if (arrival_s >= previous_s) return absl::OkStatus();
  return LineError(format, line,
                   absl::StrFormat("arrival %.7f s is earlier than the previous row's %.7f s "
                                   "(traces must be in arrival order)",
                                   arrival_s, previous_s));
}

absl::Status CheckBlockCount(TraceFormat format, int64_t line, size_t ids, int32_t input_tokens,
                             absl::string_view what) {
  int64_t expected =
      (static_cast<int64_t>(input_tokens) + kTraceBlockTokens - 1) / kTraceBlockTokens;
  if (static_cast<int64_t>(ids) == expected) return absl::OkStatus();
  return LineErrorf(format, line, what, " has ", ids, " ids but ceil(", input_tokens, "/",
                    kTraceBlockTokens, ") = ", expected, " blocks are expected");
}

}  // namespace strata::replay::internal
