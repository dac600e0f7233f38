// Fuzzes the cluster config parser (YAML or JSON text, yaml-cpp underneath) and the range checks
// it applies. Inputs over 16 KiB are skipped.
#include <cstddef>
#include <cstdint>
#include <string>

#include "strata/common/cluster_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (16 << 10)) return 0;
  auto config = strata::ParseClusterConfig(std::string(reinterpret_cast<const char*>(data), size),
                                           "fuzz.yaml");
  if (config.ok()) (void)strata::ValidateClusterConfig(*config);
  return 0;
}
