// Format names, auto-detection and whole-file loading.
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"
#include "strata/replay/trace.h"
#include "trace_parse_util.h"

namespace strata::replay {
namespace {

absl::StatusOr<TraceFormat> DetectJson(absl::string_view line) {
  nlohmann::json object =
      nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_object()) {
    if (object.contains("hash_ids") || object.contains("timestamp")) {
      return TraceFormat::kMooncake;
    }
    if (object.contains("arrival_s")) return TraceFormat::kStrata;
  }
  return absl::InvalidArgumentError(
      "first line is neither a Mooncake (hash_ids, timestamp) nor a strata (arrival_s) record");
}

absl::StatusOr<TraceFormat> DetectCsv(absl::string_view line) {
  std::string lower = absl::AsciiStrToLower(line);
  if (absl::StrContains(lower, "contexttokens")) return TraceFormat::kAzure;
  if (absl::StrContains(lower, "request tokens")) return TraceFormat::kBurstGpt;
  absl::StatusOr<std::vector<std::string>> fields = internal::SplitCsvRecord(line);
  if (fields.ok() && fields->size() == 3) return TraceFormat::kAzure;
  if (fields.ok() && fields->size() == 6) return TraceFormat::kBurstGpt;
  return absl::InvalidArgumentError(
      "first line is neither an Azure (3 columns) nor a BurstGPT (6 columns) CSV row");
}

}  // namespace

std::string_view TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kAzure:
      return "azure";
    case TraceFormat::kBurstGpt:
      return "burstgpt";
    case TraceFormat::kStrata:
      return "strata";
  }
  return "unknown";
}

absl::StatusOr<TraceFormat> ParseTraceFormatName(std::string_view name) {
  for (TraceFormat format : {TraceFormat::kMooncake, TraceFormat::kAzure, TraceFormat::kBurstGpt,
                             TraceFormat::kStrata}) {
    if (absl::EqualsIgnoreCase(internal::Sv(name), internal::Sv(TraceFormatName(format)))) {
      return format;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown trace format \"", internal::Sv(name),
                   "\" (expected mooncake, azure, burstgpt or strata)"));
}

absl::StatusOr<std::vector<TraceRequest>> ParseTrace(TraceFormat format, std::string_view text,
                                                     ParseReport* report) {
  switch (format) {
    case TraceFormat::kMooncake:
      return ParseMooncakeJsonl(text, report);
    case TraceFormat::kAzure:
      return ParseAzureCsv(text, report);
    case TraceFormat::kBurstGpt:
      return ParseBurstGptCsv(text, BurstGptOptions{}, report);
    case TraceFormat::kStrata:
      return ParseStrataJsonl(text, report);
  }
  return absl::InvalidArgumentError("unknown trace format");
}

absl::StatusOr<TraceFormat> DetectTraceFormat(std::string_view path_std,
                                              std::string_view text_std) {
  const absl::string_view path = internal::Sv(path_std), text = internal::Sv(text_std);
  std::vector<internal::Line> lines = internal::NonBlankLines(text);
  if (lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot detect the format of empty ", path));
  }
  absl::string_view first = absl::StripAsciiWhitespace(lines.front().text);
  bool json_like = first.front() == '{' || absl::EndsWithIgnoreCase(path, ".jsonl") ||
                   absl::EndsWithIgnoreCase(path, ".json");
  absl::StatusOr<TraceFormat> format = json_like ? DetectJson(first) : DetectCsv(first);
  if (!format.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot detect the trace format of ", path, ": ", format.status().message()));
  }
  return format;
}

absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path, ParseReport* report) {
  return LoadTrace(path, "auto", report);
}

absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path,
                                                    std::string_view format_name,
                                                    ParseReport* report) {
  TraceFormat format = TraceFormat::kMooncake;
  if (format_name != "auto") {
    STRATA_ASSIGN_OR_RETURN(format, ParseTraceFormatName(format_name));
  }
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  if (format_name == "auto") {
    STRATA_ASSIGN_OR_RETURN(format, DetectTraceFormat(path, text));
  }
  absl::StatusOr<std::vector<TraceRequest>> requests = ParseTrace(format, text, report);
  if (!requests.ok()) {
    return absl::Status(requests.status().code(),
                        absl::StrCat(path, ": ", requests.status().message()));
  }
  return requests;
}

}  // namespace strata::replay
