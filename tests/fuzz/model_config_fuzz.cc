// Fuzzes a checkpoint's model configuration: ModelConfig::FromDirectory on a temporary
// directory (one per process) holding the input as config.json, up to its first NUL byte, and
// what follows that byte, when there is one, as generation_config.json. A configuration that
// loads has its RoPE frequencies computed, and must load back from its own ToJson() to the same
// JSON (the contract of model_config.h); a broken round trip aborts (a finding, like a crash).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "strata/engine/model_config.h"

namespace {

const std::string& TempDir() {
  static const std::string* dir = [] {
    auto* d = new std::string("/tmp/strata_fuzz_model_config." + std::to_string(getpid()));
    std::filesystem::create_directories(*d);
    return d;
  }();
  return *dir;
}

bool Write(const std::string& path, std::string_view text) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return false;
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  std::fclose(file);
  return written;
}

volatile size_t sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = TempDir();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string config = dir + "/config.json";
  const std::string generation = dir + "/generation_config.json";
  std::remove(generation.c_str());
  if (!Write(config, input.substr(0, nul))) return 0;
  if (nul != std::string_view::npos && !Write(generation, input.substr(nul + 1))) return 0;
  auto loaded = strata::ModelConfig::FromDirectory(dir);
  if (!loaded.ok()) return 0;
  sink = sink + loaded->RopeInvFreq().size();
  const nlohmann::json written = loaded->ToJson();
  auto again = strata::ModelConfig::FromJson(written, "ToJson()");
  if (!again.ok() || again->ToJson() != written) {
    std::fprintf(stderr, "model_config_fuzz: ToJson() does not load back the same: %s\n%s\n",
                 again.ok() ? again->ToJson().dump().c_str() : again.status().ToString().c_str(),
                 written.dump().c_str());
    std::abort();
  }
  return 0;
}
