// Fuzzes the request-trace parsers: format detection, then every parser on the same text
// (Mooncake JSONL, Azure CSV, BurstGPT CSV with failed rows kept and dropped, strata JSONL).
// Requests read back from strata JSONL are written out again with FormatStrataRecord.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "strata/replay/trace.h"

namespace replay = strata::replay;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)replay::DetectTraceFormat("trace", text);
  replay::ParseReport report;
  (void)replay::ParseMooncakeJsonl(text, &report);
  (void)replay::ParseAzureCsv(text, &report);
  (void)replay::ParseBurstGptCsv(text, {.skip_failed = true}, &report);
  (void)replay::ParseBurstGptCsv(text, {.skip_failed = false}, &report);
  auto strata = replay::ParseStrataJsonl(text, &report);
  if (strata.ok()) {
    for (const replay::TraceRequest& request : *strata) (void)replay::FormatStrataRecord(request);
  }
  return 0;
}
