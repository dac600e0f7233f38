// Fuzzes the router's worker profiles (the latency models `strata router --profile` and
// `strata sim` read): WorkerProfile::FromJson on the input; a profile that loads has its
// predictions evaluated over a range of sizes, where an overflow is a finding of UBSan.
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/router/latency_model.h"

namespace {

volatile double sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto profile = strata::router::WorkerProfile::FromJson(text);
  if (!profile.ok()) return 0;
  double total = 0;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{1} << 20}) {
    total += profile->prefill.Seconds(n) + profile->prefill.ChunkedSeconds(n, n, 512) +
             profile->decode.Seconds(n, n * 1024) + profile->TransferSeconds(n);
    for (int tier = 1; tier < 4; ++tier) total += profile->FetchSeconds(tier, n);
  }
  sink = sink + total;
  return 0;
}
