// CSV trace formats: Azure LLM inference traces and BurstGPT.
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "strata/common/status_macros.h"
#include "strata/replay/trace.h"
#include "trace_parse_util.h"

namespace strata::replay {
namespace {

using internal::Line;
using internal::LineError;
using internal::LineErrorf;

constexpr int64_t kTicksPerSecond = 10'000'000;  // Azure timestamps carry up to 7 digits.

// Calls fn(line, fields) for every data row after an optional header.
template <typename RowFn>
absl::Status ForEachCsvRow(TraceFormat format, absl::string_view text,
                           const std::vector<absl::string_view>& header, RowFn fn) {
  bool first = true;
  for (const Line& line : internal::NonBlankLines(text)) {
    absl::StatusOr<std::vector<std::string>> fields = internal::SplitCsvRecord(line.text);
    if (!fields.ok()) return LineError(format, line.number, fields.status().message());
    if (first) {
      first = false;
      STRATA_ASSIGN_OR_RETURN(bool is_header,
                              internal::CheckCsvHeader(format, line, *fields, header));
      if (is_header) continue;
    }
    if (fields->size() != header.size()) {
      return LineErrorf(format, line.number, "expected ", header.size(), " columns, got ",
                        fields->size());
    }
    STRATA_RETURN_IF_ERROR(fn(line, *fields));
  }
  return absl::OkStatus();
}

// Reads exactly `n` digits from the front of `s`.
bool TakeDigits(absl::string_view& s, int n, int64_t& out) {
  if (s.size() < static_cast<size_t>(n)) return false;
  out = 0;
  for (int i = 0; i < n; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) return false;
    out = out * 10 + (s[i] - '0');
  }
  s.remove_prefix(n);
  return true;
}

bool TakeChar(absl::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int64_t DaysInMonth(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Fraction ".d{1,7}" in ticks; true (and 0) when absent.
bool TakeFraction(absl::string_view& s, int64_t& ticks) {
  ticks = 0;
  if (!TakeChar(s, '.')) return true;
  int digits = 0;
  while (!s.empty() && absl::ascii_isdigit(static_cast<unsigned char>(s.front()))) {
    if (++digits > 7) return false;
    ticks = ticks * 10 + (s.front() - '0');
    s.remove_prefix(1);
  }
  for (int i = digits; i < 7; ++i) ticks *= 10;
  return digits > 0;
}

// Optional "Z" or "+HH:MM" / "-HH:MM"; the offset in seconds to subtract.
bool TakeZone(absl::string_view& s, int64_t& offset_s) {
  offset_s = 0;
  if (s.empty() || TakeChar(s, 'Z')) return s.empty();
  int64_t sign = s.front() == '-' ? -1 : 1;
  if (s.front() != '+' && s.front() != '-') return false;
  s.remove_prefix(1);
  int64_t hh = 0, mm = 0;
  if (!TakeDigits(s, 2, hh) || !TakeChar(s, ':') || !TakeDigits(s, 2, mm)) return false;
  if (hh > 23 || mm > 59) return false;
  offset_s = sign * (hh * 3600 + mm * 60);
  return s.empty();
}

// "YYYY-MM-DD HH:MM:SS[.fffffff][zone]" -> ticks (100 ns) since the Unix epoch, UTC.
absl::StatusOr<int64_t> ParseAzureTimestamp(absl::string_view field) {
  absl::string_view s = absl::StripAsciiWhitespace(field);
  int64_t y, mo, d, h, mi, sec, frac, offset_s;
  bool ok = TakeDigits(s, 4, y) && TakeChar(s, '-') && TakeDigits(s, 2, mo) && TakeChar(s, '-') &&
            TakeDigits(s, 2, d) && (TakeChar(s, ' ') || TakeChar(s, 'T')) && TakeDigits(s, 2, h) &&
            TakeChar(s, ':') && TakeDigits(s, 2, mi) && TakeChar(s, ':') && TakeDigits(s, 2, sec) &&
            TakeFraction(s, frac) && TakeZone(s, offset_s);
  ok = ok && mo >= 1 && mo <= 12 && d >= 1 && d <= DaysInMonth(y, mo) && h < 24 && mi < 60 &&
       sec < 60;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad timestamp \"", field, "\" (expected YYYY-MM-DD HH:MM:SS[.fffffff])"));
  }
  int64_t seconds = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_s;
  return seconds * kTicksPerSecond + frac;
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseAzureCsv(std::string_view text,
                                                        ParseReport* report) {
  constexpr TraceFormat kFormat = TraceFormat::kAzure;
  std::vector<TraceRequest> requests;
  int64_t first_ticks = 0, previous_ticks = 0;
  auto row = [&](const Line& line, const std::vector<std::string>& f) -> absl::Status {
    absl::StatusOr<int64_t> ticks = ParseAzureTimestamp(f[0]);
    if (!ticks.ok()) return LineError(kFormat, line.number, ticks.status().message());
    if (requests.empty()) first_ticks = previous_ticks = *ticks;
    STRATA_RETURN_IF_ERROR(internal::CheckOrder(
        kFormat, line.number, static_cast<double>(previous_ticks - first_ticks) / kTicksPerSecond,
        static_cast<double>(*ticks - first_ticks) / kTicksPerSecond));
    previous_ticks = *ticks;
    TraceRequest request{.arrival_s = static_cast<double>(*ticks - first_ticks) / kTicksPerSecond,
                         .line = line.number};
    absl::StatusOr<int32_t> input = internal::ParseTokenCount(f[1], "ContextTokens");
    if (!input.ok()) return LineError(kFormat, line.number, input.status().message());
    absl::StatusOr<int32_t> output = internal::ParseTokenCount(f[2], "GeneratedTokens");
    if (!output.ok()) return LineError(kFormat, line.number, output.status().message());
    request.input_tokens = *input;
    request.output_tokens = *output;
    requests.push_back(std::move(request));
    return absl::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(ForEachCsvRow(kFormat, internal::Sv(text),
                                       {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}, row));
  if (report != nullptr) *report = ParseReport{.data_rows = static_cast<int64_t>(requests.size())};
  return requests;
}

namespace {

// One BurstGPT row; `failed` per the rule in trace.h.
absl::Status BurstGptRow(const std::vector<std::string>& f, TraceRequest& request, bool& failed) {
  double timestamp = 0;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(f[0]), &timestamp) ||
      !std::isfinite(timestamp) || timestamp < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad timestamp \"", f[0], "\" (expected seconds >= 0)"));
  }
  request.arrival_s = timestamp;
  STRATA_ASSIGN_OR_RETURN(request.input_tokens, internal::ParseTokenCount(f[2], "Request tokens"));
  STRATA_ASSIGN_OR_RETURN(request.output_tokens,
                          internal::ParseTokenCount(f[3], "Response tokens"));
  STRATA_RETURN_IF_ERROR(internal::ParseTokenCount(f[4], "Total tokens").status());
  failed = request.output_tokens == 0 || absl::StrContains(absl::AsciiStrToLower(f[5]), "fail");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseBurstGptCsv(std::string_view text,
                                                           const BurstGptOptions& options,
                                                           ParseReport* report) {
  constexpr TraceFormat kFormat = TraceFormat::kBurstGpt;
  std::vector<TraceRequest> requests;
  ParseReport counts;
  double previous_s = 0;
  auto row = [&](const Line& line, const std::vector<std::string>& f) -> absl::Status {
    TraceRequest request{.line = line.number};
    bool failed = false;
    absl::Status status = BurstGptRow(f, request, failed);
    if (!status.ok()) return LineError(kFormat, line.number, status.message());
    STRATA_RETURN_IF_ERROR(
        internal::CheckOrder(kFormat, line.number, previous_s, request.arrival_s));
    previous_s = request.arrival_s;
    ++counts.data_rows;
    counts.failed_rows += failed;
    if (failed && options.skip_failed) {
      ++counts.skipped_rows;
    } else {
      requests.push_back(std::move(request));
    }
    return absl::OkStatus();
  };
  STRATA_RETURN_IF_ERROR(ForEachCsvRow(
      kFormat, internal::Sv(text),
      {"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"},
      row));
  if (report != nullptr) *report = counts;
  return requests;
}

}  // namespace strata::replay
