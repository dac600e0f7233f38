#pragma once
// Request traces for open-loop replay and simulation: parsing of public trace formats into one
// in-memory form, TraceRequest.
//
// Formats (TraceFormat):
//   kMooncake  JSONL, one object a line:
//                {"timestamp": ms, "input_length": N, "output_length": N, "hash_ids": [...]}
//              timestamp is milliseconds from the start of the trace (integer or float, >= 0);
//              hash_ids are prefix-chained block ids of kTraceBlockTokens (512) tokens each and
//              len(hash_ids) must equal ceil(input_length / 512).
//   kAzure     CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference traces 2023 and
//              2024). TIMESTAMP is `YYYY-MM-DD HH:MM:SS[.f...]` with up to 7 fractional digits,
//              optionally followed by `Z` or a `+HH:MM` / `-HH:MM` UTC offset (a 'T' separator is
//              accepted too). arrival_s is seconds since the first data row.
//   kBurstGpt  CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`;
//              Timestamp is seconds (kept as is, not rebased). A row is *failed* when its Response
//              tokens is 0 or its Log Type contains "fail" (case-insensitive). Failed rows are
//              counted in ParseReport::failed_rows and dropped unless BurstGptOptions::skip_failed
//              is false.
//   kStrata    strata's own recording format, JSONL, one object a line:
//                {"arrival_s": 1.25, "input_tokens": 700, "output_tokens": 64,
//                 "block_hashes": [17, 18], "prompt": "..."}
//              arrival_s (seconds, number >= 0), input_tokens and output_tokens (integers >= 0)
//              are required. block_hashes (optional) has the Mooncake hash_ids meaning: one id
//              per 512-token block, so its length must be ceil(input_tokens / 512). prompt
//              (optional) is the request text. Keys not listed here are ignored, so a recorder
//              may add fields without breaking older readers. FormatStrataRecord writes it.
//
// Rules common to every parser:
//   - Line numbers are 1-based physical lines of the input; "\r\n" line ends are accepted;
//     blank (whitespace-only) lines are skipped.
//   - CSV: the first non-blank line is a header when its first field does not start with a
//     digit; its column names must then match the format's (case-insensitive, surrounding
//     spaces ignored). Without such a header the first line is data. Fields may be quoted
//     ("a,b" with "" as an escaped quote). Every row must have exactly the format's columns.
//   - Arrival times must be non-decreasing in file order: a row earlier than the one before it
//     is an error (not silently re-sorted), since an unordered trace usually means a broken
//     file or a merge of two traces, and replaying it sorted would hide that.
//   - Token counts must be integers in [0, 2^31). Every violation - bad JSON, a missing field,
//     a wrong type, a negative count, an inconsistent hash_ids length, an unordered timestamp,
//     a wrong CSV column count, a bad timestamp - is InvalidArgument "<format> line N: reason".
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::replay {

// Tokens per Mooncake hash id / strata block_hashes entry.
inline constexpr int32_t kTraceBlockTokens = 512;

struct TraceRequest {
  double arrival_s = 0.0;  // Seconds from the start of the trace.
  int32_t input_tokens = 0;
  int32_t output_tokens = 0;
  std::vector<uint64_t> block_ids;  // Mooncake hash_ids (512-token blocks); empty if unknown.
  int64_t line = 0;                 // 1-based line of the source file (0 if not from a file).
  std::string prompt;               // Strata format only; empty when absent.
};

enum class TraceFormat { kMooncake, kAzure, kBurstGpt, kStrata };

// "mooncake", "azure", "burstgpt", "strata".
std::string_view TraceFormatName(TraceFormat format);
absl::StatusOr<TraceFormat> ParseTraceFormatName(std::string_view name);

// Counts a parser reports besides the requests it returns.
struct ParseReport {
  int64_t data_rows = 0;     // Non-blank, non-header lines read.
  int64_t failed_rows = 0;   // BurstGPT rows that are failed (see above); 0 for other formats.
  int64_t skipped_rows = 0;  // Failed rows dropped from the result.
};

struct BurstGptOptions {
  bool skip_failed = true;
};

// Each parser returns the requests in file order, or InvalidArgument naming the line.
// `report` may be null.
absl::StatusOr<std::vector<TraceRequest>> ParseMooncakeJsonl(std::string_view text,
                                                             ParseReport* report = nullptr);
absl::StatusOr<std::vector<TraceRequest>> ParseAzureCsv(std::string_view text,
                                                        ParseReport* report = nullptr);
absl::StatusOr<std::vector<TraceRequest>> ParseBurstGptCsv(std::string_view text,
                                                           const BurstGptOptions& options = {},
                                                           ParseReport* report = nullptr);
absl::StatusOr<std::vector<TraceRequest>> ParseStrataJsonl(std::string_view text,
                                                           ParseReport* report = nullptr);

// Dispatches on `format` (BurstGPT with default options).
absl::StatusOr<std::vector<TraceRequest>> ParseTrace(TraceFormat format, std::string_view text,
                                                     ParseReport* report = nullptr);

// Guesses the format from the first non-blank line of `text`: a JSON object with "hash_ids"
// or "timestamp" is Mooncake, one with "arrival_s" is strata; a CSV header naming ContextTokens
// is Azure, one naming "Request tokens" is BurstGPT; a header-less CSV row with 3 columns is
// Azure, with 6 columns BurstGPT. `path` breaks ties only by its extension (.jsonl / .csv).
// InvalidArgument when nothing matches.
absl::StatusOr<TraceFormat> DetectTraceFormat(std::string_view path, std::string_view text);

// Reads `path`, detects its format and parses it. Errors name the path.
absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path,
                                                    ParseReport* report = nullptr);
// Reads `path` in the named format (ParseTraceFormatName), or detects it for "auto". Errors
// name the path.
absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path,
                                                    std::string_view format_name,
                                                    ParseReport* report = nullptr);

// One strata-format JSONL line (no trailing newline) for `request`; block_hashes and prompt
// are written only when non-empty. ParseStrataJsonl reads it back exactly (arrival_s is
// written with round-trip precision).
std::string FormatStrataRecord(const TraceRequest& request);

}  // namespace strata::replay
