// `strata generate`: run prompts through the local engine as one continuous batch.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "args.h"
#include "commands.h"
#include "nlohmann/json.hpp"
#include "strata/engine/engine.h"
#include "strata/engine/presets.h"

namespace strata::cli {
namespace {

struct GenerateFlags {
  std::string model = "preset:tiny-llama";
  std::string plugin = "cpu";
  std::vector<std::string> prompts;
  std::vector<std::string> stops;
  int max_tokens = 32;
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  double min_p = 0.0;
  long long seed = -1;
  bool ignore_eos = false;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  int logprobs = -1;
  int block_size = 16;
  int kv_cache_mb = 256;
  int max_batched_tokens = 512;
  bool verbose = false;
  bool json = false;
};

void AddFlags(ArgParser& p, GenerateFlags& f) {
  p.AddString("--model", &f.model, "checkpoint directory or preset:NAME");
  p.AddRepeated("--prompt", &f.prompts, "prompt text; several run as one continuous batch");
  p.AddInt("--max-tokens", &f.max_tokens, "tokens to generate per prompt");
  p.AddDouble("--temperature", &f.temperature, "sampling temperature (0 = greedy)");
  p.AddDouble("--top-p", &f.top_p, "nucleus sampling threshold");
  p.AddInt("--top-k", &f.top_k, "sample from the k most likely tokens (0 = off)");
  p.AddDouble("--min-p", &f.min_p, "drop tokens below min-p times the top probability");
  p.AddInt64("--seed", &f.seed, "sampling seed (-1 = request order)");
  p.AddRepeated("--stop", &f.stops, "stop string");
  p.AddBool("--ignore-eos", &f.ignore_eos, "keep generating past end-of-sequence tokens");
  p.AddDouble("--presence-penalty", &f.presence_penalty, "OpenAI presence penalty [-2, 2]");
  p.AddDouble("--frequency-penalty", &f.frequency_penalty, "OpenAI frequency penalty [-2, 2]");
  p.AddDouble("--repetition-penalty", &f.repetition_penalty, "HF repetition penalty (> 0)");
  p.AddInt("--logprobs", &f.logprobs,
           "with --json: each token's logprob and the top N alternatives (-1 = off)");
  p.AddString("--plugin", &f.plugin, "engine plugin: a name (cpu) or a path to a .so");
  p.AddInt("--block-size", &f.block_size, "KV cache block size in tokens");
  p.AddInt("--kv-cache-mb", &f.kv_cache_mb, "KV cache size in MiB");
  p.AddInt("--max-batched-tokens", &f.max_batched_tokens, "token budget of one engine step");
  p.AddBool("--verbose", &f.verbose, "print timing and token counts to stderr");
  p.AddBool("--json", &f.json,
            "print one JSON object per prompt (prompt and output token ids, text, finish reason)");
}

SamplingParams ToParams(const GenerateFlags& f) {
  SamplingParams s;
  s.max_tokens = f.max_tokens;
  s.temperature = static_cast<float>(f.temperature);
  s.top_p = static_cast<float>(f.top_p);
  s.top_k = f.top_k;
  s.min_p = static_cast<float>(f.min_p);
  if (f.seed >= 0) s.seed = static_cast<uint64_t>(f.seed);
  s.stop = f.stops;
  s.ignore_eos = f.ignore_eos;
  s.presence_penalty = static_cast<float>(f.presence_penalty);
  s.frequency_penalty = static_cast<float>(f.frequency_penalty);
  s.repetition_penalty = static_cast<float>(f.repetition_penalty);
  s.logprobs = f.logprobs;
  return s;
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const GenerateFlags& f) {
  auto dir = ResolveModelPath(f.model);
  if (!dir.ok()) return dir.status();
  EngineOptions opts;
  opts.plugin = f.plugin;
  opts.runner.block_size = f.block_size;
  opts.runner.kv_cache_bytes = int64_t{f.kv_cache_mb} << 20;
  opts.scheduler.max_num_batched_tokens = f.max_batched_tokens;
  return Engine::Create(*dir, opts);
}

struct Result {
  std::vector<int32_t> prompt_tokens, tokens;
  std::vector<SampleResult> logprobs;
  std::string text;
  FinishReason finish = FinishReason::kNone;
};

nlohmann::json LogprobsJson(const std::vector<SampleResult>& samples) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : samples) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& t : s.top) top.push_back({{"token", t.token}, {"logprob", t.logprob}});
    out.push_back({{"token", s.token}, {"logprob", s.logprob}, {"top", top}});
  }
  return out;
}

void PrintResults(const GenerateFlags& f, const std::vector<Result>& results, bool streamed) {
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    if (f.json) {
      nlohmann::json j = {{"prompt", f.prompts[i]},
                          {"prompt_tokens", r.prompt_tokens},
                          {"tokens", r.tokens},
                          {"text", r.text},
                          {"finish_reason", FinishReasonName(r.finish)}};
      if (f.logprobs >= 0) j["logprobs"] = LogprobsJson(r.logprobs);
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else if (streamed) {
      std::fputs("\n", stdout);
    } else {
      std::printf("[%zu] %s%s\n", i + 1, f.prompts[i].c_str(), r.text.c_str());
    }
  }
}

// One prompt streams its text as it is generated; several print in order when all are done.
absl::Status Run(Engine& engine, const GenerateFlags& f, const SamplingParams& params) {
  const bool stream = f.prompts.size() == 1 && !f.json;
  std::vector<Result> results(f.prompts.size());
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    results[i].prompt_tokens = engine.tokenizer().Encode(f.prompts[i], true);
    if (auto st = engine.AddRequest(absl::StrCat(i), results[i].prompt_tokens, params); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("prompt ", i + 1, ": ", st.message()));
    }
  }
  // A batch prints nothing until it is done: show progress on a terminal meanwhile.
  const bool progress = !stream && isatty(STDERR_FILENO);
  size_t done = 0, tokens = 0;
  while (engine.HasUnfinished()) {
    auto outputs = engine.Step();
    if (!outputs.ok()) return outputs.status();
    for (const auto& o : *outputs) {
      Result& r = results[std::stoul(o.request_id)];
      r.text += o.new_text;
      r.tokens.insert(r.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      tokens += o.new_tokens.size();
      if (o.finished) {
        r.finish = o.finish_reason;
        ++done;
      }
      if (stream) {
        std::fputs(o.new_text.c_str(), stdout);
        std::fflush(stdout);
      }
    }
    if (progress) {
      std::fprintf(stderr, "\rgenerate: %zu/%zu prompts done, %zu tokens", done, results.size(),
                   tokens);
    }
  }
  if (progress) std::fputs("\n", stderr);
  PrintResults(f, results, stream);
  return absl::OkStatus();
}

}  // namespace

int RunGenerate(const Args& args) {
  GenerateFlags f;
  ArgParser p("strata generate [--model DIR|preset:NAME] --prompt TEXT [--prompt TEXT ...]",
              "Generate completions with the local engine. Several --prompt flags run as one\n"
              "continuous batch. Greedy by default; --temperature > 0 samples.");
  AddFlags(p, f);
  if (auto st = p.Parse(args); !st.ok()) return Fail("generate", std::string(st.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (f.prompts.empty()) return Fail("generate", "at least one --prompt is required", 2);
  const SamplingParams params = ToParams(f);
  if (auto st = params.Validate(1 << 30); !st.ok()) {
    return Fail("generate", std::string(st.message()), 2);
  }
  const auto start = std::chrono::steady_clock::now();
  auto engine = MakeEngine(f);
  if (!engine.ok()) return Fail("generate", std::string(engine.status().message()), 1);
  const auto loaded = std::chrono::steady_clock::now();
  if (auto st = Run(**engine, f, params); !st.ok()) {
    return Fail("generate", std::string(st.message()),
                st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1);
  }
  if (f.verbose) {
    const auto end = std::chrono::steady_clock::now();
    const auto& s = (*engine)->stats();
    const double gen_s = std::chrono::duration<double>(end - loaded).count();
    std::fprintf(stderr,
                 "load %.3f s, generate %.3f s, %lld prompt + %lld generated tokens, "
                 "%lld steps, %.1f tok/s\n",
                 std::chrono::duration<double>(loaded - start).count(), gen_s,
                 static_cast<long long>(s.prompt_tokens_computed),
                 static_cast<long long>(s.generated_tokens), static_cast<long long>(s.steps),
                 s.generated_tokens / std::max(gen_s, 1e-9));
  }
  return 0;
}

}  // namespace strata::cli
