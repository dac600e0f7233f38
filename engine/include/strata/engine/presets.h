#pragma once
// Built-in model presets: Hugging Face-format checkpoints (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json) with deterministic random
// weights, loadable by strata and by `transformers`. They let the whole cluster run with no
// downloaded weights.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/engine/model_config.h"

namespace strata {

struct PresetInfo {
  std::string name;
  std::string description;
};

std::vector<PresetInfo> ListPresets();

// The preset's architecture; NotFound naming the known presets for an unknown name.
absl::StatusOr<ModelConfig> PresetConfig(const std::string& name);

// Writes the preset checkpoint into `out_dir` (created if needed). `dtype` is "float32" or
// "bfloat16" ("" = the preset's default). The same name always yields the same bytes.
absl::Status WritePreset(const std::string& name, const std::string& out_dir,
                         const std::string& dtype = "");

// "preset:NAME" -> a directory holding that preset, written on first use under
// $STRATA_CACHE_DIR (default ~/.cache/strata, else /tmp/strata-cache)/presets/NAME-v<ver>;
// anything else is returned as is (a checkpoint directory).
absl::StatusOr<std::string> ResolveModelPath(const std::string& spec);

// The model name an API serves for `spec`: NAME for "preset:NAME", else the directory's base
// name ("/models/Llama-3.1-8B/" -> "Llama-3.1-8B").
std::string ServedModelName(const std::string& spec);

}  // namespace strata
