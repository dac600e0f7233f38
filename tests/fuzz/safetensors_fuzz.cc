// Fuzzes the safetensors reader: the input is written to a temporary file (one per process) and
// opened with SafetensorsFile::Open, which validates the header length, the JSON header and every
// tensor's dtype, shape and data offsets; a file that opens has every tensor's bytes read.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "strata/engine/safetensors.h"

namespace {

volatile uint64_t sink = 0;  // keeps the reads of tensor data

const std::string& TempPath() {
  static const std::string* path = new std::string(
      "/tmp/strata_fuzz_safetensors." + std::to_string(getpid()) + ".safetensors");
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = TempPath();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  const bool written = std::fwrite(data, 1, size, file) == size;
  std::fclose(file);
  if (written) {
    auto opened = strata::SafetensorsFile::Open(path);
    if (opened.ok()) {
      uint64_t sum = 0;
      for (const auto& [name, tensor] : (*opened)->tensors()) {
        (void)tensor.numel();
        for (size_t i = 0; i < tensor.nbytes; ++i) sum += tensor.data[i];
      }
      (void)(*opened)->Find("x");
      sink = sink + sum;
    }
  }
  std::remove(path.c_str());
  return 0;
}
