// `strata model init|presets`: write a preset checkpoint, list the presets.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "args.h"
#include "commands.h"
#include "strata/engine/presets.h"

namespace strata::cli {
namespace {

int RunInit(const Args& args) {
  std::string preset, out, dtype;
  ArgParser p("strata model init --preset NAME --out DIR [--dtype float32|bfloat16]",
              "Write a Hugging Face-format checkpoint (config.json, model.safetensors,\n"
              "tokenizer.json, ...) with deterministic random weights for a built-in preset.\n"
              "`strata model presets` lists the presets.");
  p.AddString("--preset", &preset, "preset name, e.g. tiny-llama");
  p.AddString("--out", &out, "output directory (created if missing)");
  p.AddString("--dtype", &dtype, "weight dtype: float32 or bfloat16 (default: the preset's)");
  if (auto st = p.Parse(args); !st.ok()) return Fail("model init", st.message().data(), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (preset.empty() || out.empty())
    return Fail("model init", "--preset and --out are required", 2);
  if (auto st = WritePreset(preset, out, dtype); !st.ok()) {
    return Fail(
        "model init", std::string(st.message()),
        st.code() == absl::StatusCode::kNotFound || st.code() == absl::StatusCode::kInvalidArgument
            ? 2
            : 1);
  }
  std::printf("wrote preset %s to %s\n", preset.c_str(), out.c_str());
  return 0;
}

int RunPresets() {
  for (const auto& p : ListPresets()) {
    std::printf("%-15s %s\n", p.name.c_str(), p.description.c_str());
  }
  return 0;
}

void PrintModelUsage() {
  std::printf(
      "usage: strata model <init|presets> [flags]\n\n"
      "  init     write a preset checkpoint with deterministic random weights\n"
      "  presets  list the built-in presets\n\n"
      "Run `strata model init --help` for its flags.\n");
}

}  // namespace

int RunModel(const Args& args) {
  if (args.empty()) {
    PrintModelUsage();
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    PrintModelUsage();
    return 0;
  }
  if (args[0] == "init") return RunInit(Args(args.begin() + 1, args.end()));
  if (args[0] == "presets") return RunPresets();
  return Fail("model", absl::StrCat("unknown subcommand '", args[0], "' (init, presets)"), 2);
}

}  // namespace strata::cli
