// JSONL trace formats: Mooncake and strata's own recording format.
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "strata/common/json_limits.h"
#include "strata/common/status_macros.h"
#include "strata/replay/trace.h"
#include "trace_parse_util.h"

namespace strata::replay {
namespace {

using internal::Line;
using internal::LineError;
using internal::LineErrorf;
using nlohmann::json;

// Field access that reports the reason only; the caller prefixes format and line.
absl::StatusOr<const json*> Field(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing field \"", key, "\""));
  }
  return &*it;
}

absl::StatusOr<double> NonNegativeNumber(const json& object, const char* key) {
  STRATA_ASSIGN_OR_RETURN(const json* value, Field(object, key));
  if (!value->is_number()) {
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" must be a number"));
  }
  double number = value->get<double>();
  if (!std::isfinite(number) || number < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"", key, "\" must be finite and >= 0 (got ", value->dump(), ")"));
  }
  return number;
}

absl::StatusOr<int32_t> TokenCount(const json& object, const char* key) {
  STRATA_ASSIGN_OR_RETURN(const json* value, Field(object, key));
  double number = 0;
  if (value->is_number_unsigned()) {
    uint64_t u = value->get<uint64_t>();
    number = u > static_cast<uint64_t>(INT32_MAX) ? 1e300 : static_cast<double>(u);
  } else if (value->is_number()) {
    number = value->get<double>();
  } else {
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" must be an integer"));
  }
  if (number < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"", key, "\" is negative (", value->dump(), ")"));
  }
  if (!(number <= INT32_MAX) || number != std::floor(number)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field \"", key, "\" must be an integer below 2^31 (got ", value->dump(), ")"));
  }
  return static_cast<int32_t>(number);
}

absl::StatusOr<std::vector<uint64_t>> BlockIds(const json& value, const char* key) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" must be an array"));
  }
  std::vector<uint64_t> ids;
  ids.reserve(value.size());
  for (const json& id : value) {
    if (!id.is_number_unsigned()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field \"", key, "\" must hold non-negative integers (got ", id.dump(), ")"));
    }
    ids.push_back(id.get<uint64_t>());
  }
  return ids;
}

absl::StatusOr<TraceRequest> MooncakeRecord(const json& object) {
  TraceRequest request;
  STRATA_ASSIGN_OR_RETURN(double timestamp_ms, NonNegativeNumber(object, "timestamp"));
  request.arrival_s = timestamp_ms / 1000.0;
  STRATA_ASSIGN_OR_RETURN(request.input_tokens, TokenCount(object, "input_length"));
  STRATA_ASSIGN_OR_RETURN(request.output_tokens, TokenCount(object, "output_length"));
  STRATA_ASSIGN_OR_RETURN(const json* ids, Field(object, "hash_ids"));
  STRATA_ASSIGN_OR_RETURN(request.block_ids, BlockIds(*ids, "hash_ids"));
  return request;
}

absl::StatusOr<TraceRequest> StrataRecord(const json& object) {
  TraceRequest request;
  STRATA_ASSIGN_OR_RETURN(request.arrival_s, NonNegativeNumber(object, "arrival_s"));
  STRATA_ASSIGN_OR_RETURN(request.input_tokens, TokenCount(object, "input_tokens"));
  STRATA_ASSIGN_OR_RETURN(request.output_tokens, TokenCount(object, "output_tokens"));
  if (auto it = object.find("block_hashes"); it != object.end()) {
    STRATA_ASSIGN_OR_RETURN(request.block_ids, BlockIds(*it, "block_hashes"));
  }
  if (auto it = object.find("prompt"); it != object.end()) {
    if (!it->is_string()) return absl::InvalidArgumentError("field \"prompt\" must be a string");
    request.prompt = it->get<std::string>();
  }
  return request;
}

using RecordFn = absl::StatusOr<TraceRequest> (*)(const json&);

// Parses one line into `request`; every failure carries the format and line number.
absl::Status ParseLine(TraceFormat format, RecordFn record_fn, const Line& line,
                       TraceRequest& request) {
  if (absl::Status depth = CheckJsonDepth({line.text.data(), line.text.size()});
      !depth.ok()) {
    return LineError(format, line.number, depth.message());
  }
  json object =
      json::parse(line.text.begin(), line.text.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return LineError(format, line.number, "invalid JSON");
  if (!object.is_object()) return LineError(format, line.number, "expected a JSON object");
  absl::StatusOr<TraceRequest> parsed = record_fn(object);
  if (!parsed.ok()) return LineError(format, line.number, parsed.status().message());
  request = *std::move(parsed);
  request.line = line.number;
  if (format == TraceFormat::kStrata && request.block_ids.empty()) return absl::OkStatus();
  return internal::CheckBlockCount(format, line.number, request.block_ids.size(),
                                   request.input_tokens,
                                   format == TraceFormat::kMooncake ? "hash_ids" : "block_hashes");
}

absl::StatusOr<std::vector<TraceRequest>> ParseJsonl(TraceFormat format, RecordFn record_fn,
                                                     absl::string_view text, ParseReport* report) {
  std::vector<TraceRequest> requests;
  double previous_s = 0;
  for (const Line& line : internal::NonBlankLines(text)) {
    TraceRequest request;
    try {
      STRATA_RETURN_IF_ERROR(ParseLine(format, record_fn, line, request));
    } catch (const std::exception& e) {  // nlohmann only; the checks above should prevent it.
      return LineErrorf(format, line.number, "malformed record: ", e.what());
    }
    STRATA_RETURN_IF_ERROR(
        internal::CheckOrder(format, line.number, previous_s, request.arrival_s));
    previous_s = request.arrival_s;
    requests.push_back(std::move(request));
  }
  if (report != nullptr) *report = ParseReport{.data_rows = static_cast<int64_t>(requests.size())};
  return requests;
}

}  // namespace

absl::StatusOr<std::vector<TraceRequest>> ParseMooncakeJsonl(std::string_view text,
                                                             ParseReport* report) {
  return ParseJsonl(TraceFormat::kMooncake, &MooncakeRecord, internal::Sv(text), report);
}

absl::StatusOr<std::vector<TraceRequest>> ParseStrataJsonl(std::string_view text,
                                                           ParseReport* report) {
  return ParseJsonl(TraceFormat::kStrata, &StrataRecord, internal::Sv(text), report);
}

std::string FormatStrataRecord(const TraceRequest& request) {
  json object = json::object();
  object["arrival_s"] = request.arrival_s;
  object["input_tokens"] = request.input_tokens;
  object["output_tokens"] = request.output_tokens;
  if (!request.block_ids.empty()) object["block_hashes"] = request.block_ids;
  if (!request.prompt.empty()) object["prompt"] = request.prompt;
  // Replacement keeps invalid UTF-8 in a recorded prompt from throwing.
  return object.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace strata::replay
