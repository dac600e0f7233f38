// `strata profile --url WORKER_HTTP_URL`: measures a running worker's prefill and decode times
// through its OpenAI API and fits the router's latency models (strata/router/latency_model.h).
//
// Prefill: for each prompt length L and batch B (B*L within the step token budget), B
// concurrent streaming completions of fresh random prompts with max_tokens 1; the sample is
// (B sequences of L new tokens, the slowest first token), median over --repeats.
// Decode: for each batch B and prompt length C, B concurrent completions with --decode-tokens
// output tokens (ignore_eos); a stream's step time is the median gap between its tokens in the
// second half of its output (every sequence is decoding by then); the sample is (B, total
// context B*(C + 3/4 of the output), the median over the streams).
// Every request gets its own prompt (a new synthesizer seed per run), so the prefix cache
// cannot hide compute. Transfer and tier bandwidths are not measured here: flags give measured
// values, and a link without one is left out of the profile (its consumers say so).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "args.h"
#include "commands.h"
#include "strata/common/file_util.h"
#include "strata/common/status_macros.h"
#include "strata/engine/model_config.h"
#include "strata/engine/presets.h"
#include "strata/replay/replayer.h"
#include "strata/router/latency_model.h"

namespace strata::cli {
namespace {

using replay::RequestResult;
using replay::TraceRequest;
using router::DecodeSample;
using router::PrefillSample;

struct ProfileFlags {
  std::string url, out, name = "profile", model, served_model, hardware = "unknown", device;
  std::string prefill_lens = "16,64,128,256,384,512", prefill_batches = "1,2,4";
  std::string decode_batches = "1,2,4,8,16", decode_lens = "32,256";
  std::string prefill_contexts = "512,1024,2048", prefill_context_lens = "128,512";
  int repeats = 3, decode_tokens = 32, max_batch_tokens = 512, max_running = 64;
  int block_size = 16, vocab_size = 1024;
  long long num_kv_blocks = 0, seed = 1;
  // Link bandwidths measured elsewhere (kv_handoff_bench, the tier benchmarks); 0 = not
  // measured: the profile omits the link.
  double kv_transfer_gbps = 0, host_gbps = 0, disk_gbps = 0, remote_gbps = 0;
  double kv_transfer_latency_us = 50;
};

void AddFlags(ArgParser& p, ProfileFlags& f) {
  p.AddString("--url", &f.url, "the worker's OpenAI API, e.g. http://127.0.0.1:8001");
  p.AddString("--out", &f.out, "write the profile JSON here (default: stdout)");
  p.AddString("--name", &f.name, "profile name");
  p.AddString("--hardware", &f.hardware, "where it was measured (recorded in the profile)");
  p.AddString("--device", &f.device,
              "the workers it describes, as they report it (\"cuda:NVIDIA H100\", \"cpu\"); "
              "default: the worker's /server_info");
  p.AddString("--model", &f.model, "model dir or preset:NAME: KV block bytes from its config");
  p.AddString("--served-model-name", &f.served_model, "model name to send (default: /v1/models)");
  p.AddString("--prefill-lens", &f.prefill_lens, "prompt lengths for prefill samples");
  p.AddString("--prefill-batches", &f.prefill_batches, "concurrent prompts per prefill sample");
  p.AddString("--prefill-contexts", &f.prefill_contexts,
              "cached prefix lengths (multiples of 512) for prefill-after-prefix samples");
  p.AddString("--prefill-context-lens", &f.prefill_context_lens,
              "new tokens after each cached prefix (<= --max-batch-tokens)");
  p.AddString("--decode-batches", &f.decode_batches, "concurrent streams per decode sample");
  p.AddString("--decode-lens", &f.decode_lens, "prompt lengths (context) for decode samples");
  p.AddInt("--decode-tokens", &f.decode_tokens, "output tokens per decode stream");
  p.AddInt("--repeats", &f.repeats, "prefill repetitions (the median is kept)");
  p.AddInt("--max-batch-tokens", &f.max_batch_tokens, "the worker's step token budget");
  p.AddInt("--max-running", &f.max_running, "the worker's running batch limit");
  p.AddInt("--block-size", &f.block_size, "the worker's KV block size");
  p.AddInt64("--num-kv-blocks", &f.num_kv_blocks, "the worker's KV blocks (recorded)");
  p.AddInt("--vocab-size", &f.vocab_size, "draw prompt token ids from [0, N)");
  p.AddInt64("--seed", &f.seed, "prompt seed");
  p.AddDouble("--kv-transfer-gbps", &f.kv_transfer_gbps,
              "prefill->decode KV bandwidth, GB/s, as measured (0 = not measured: omitted)");
  p.AddDouble("--kv-transfer-latency-us", &f.kv_transfer_latency_us,
              "prefill->decode fixed cost per handoff, microseconds");
  p.AddDouble("--host-gbps", &f.host_gbps, "G2 (pinned host) fetch bandwidth, GB/s (0 = omitted)");
  p.AddDouble("--disk-gbps", &f.disk_gbps, "G3 (disk) fetch bandwidth, GB/s (0 = omitted)");
  p.AddDouble("--remote-gbps", &f.remote_gbps,
              "G4 (remote kvstore) fetch bandwidth, GB/s (0 = omitted)");
}

absl::StatusOr<std::vector<int>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", part, "' is not a count > 0"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Runs `batch` concurrent requests of `prompt` tokens and `output` tokens each, with prompts
// no earlier run used. Fails on any request error.
class Runner {
 public:
  Runner(replay::Replayer* replayer, int vocab, uint64_t seed)
      : replayer_(replayer), vocab_(vocab), seed_(seed) {}

  absl::StatusOr<std::vector<RequestResult>> Run(int batch, int prompt, int output) {
    auto prompts = replay::PromptSynthesizer::Create(vocab_, {}, seed_ + 1000003 * runs_++);
    if (!prompts.ok()) return prompts.status();
    std::vector<TraceRequest> requests(batch);
    for (auto& r : requests) r.input_tokens = prompt, r.output_tokens = output;
    return RunChecked(requests, *prompts);
  }

  // Sends a prompt of `prefix` tokens (caching it on the worker), then one that continues it
  // with `fresh` new tokens; returns the second request's result (its usage says how much of
  // the prefix the worker really reused). `prefix` is a multiple of the 512-token trace block.
  absl::StatusOr<RequestResult> RunAfterPrefix(int prefix, int fresh) {
    auto prompts = replay::PromptSynthesizer::Create(vocab_, {}, seed_ + 1000003 * runs_++);
    if (!prompts.ok()) return prompts.status();
    TraceRequest first;
    first.input_tokens = prefix;
    first.output_tokens = 1;
    for (int b = 0; b < prefix / replay::kTraceBlockTokens; ++b) first.block_ids.push_back(b);
    TraceRequest second = first;
    second.input_tokens = prefix + fresh;
    // One new block id per (partial) trace block of the fresh tokens.
    const int fresh_blocks = (fresh + replay::kTraceBlockTokens - 1) / replay::kTraceBlockTokens;
    for (int b = 0; b < fresh_blocks; ++b) {
      second.block_ids.push_back(first.block_ids.size() + static_cast<uint64_t>(b));
    }
    STRATA_RETURN_IF_ERROR(RunChecked({first}, *prompts).status());
    auto results = RunChecked({second}, *prompts);
    if (!results.ok()) return results.status();
    return results->front();
  }

 private:
  absl::StatusOr<std::vector<RequestResult>> RunChecked(const std::vector<TraceRequest>& requests,
                                                        const replay::PromptSynthesizer& prompts) {
    auto results = replayer_->Run(requests, prompts);
    if (!results.ok()) return results.status();
    for (const RequestResult& r : *results) {
      if (!r.ok()) {
        return absl::UnavailableError(absl::StrCat("request failed (", replay::ErrorKindName(r.error),
                                                   "): ", r.error_type, " ", r.error_message));
      }
    }
    return results;
  }

  replay::Replayer* replayer_;
  int vocab_;
  uint64_t seed_;
  uint64_t runs_ = 0;
};

absl::StatusOr<std::vector<PrefillSample>> MeasurePrefill(Runner& runner, const ProfileFlags& f) {
  std::vector<int> lens, batches;
  STRATA_ASSIGN_OR_RETURN(lens, ParseList("--prefill-lens", f.prefill_lens));
  STRATA_ASSIGN_OR_RETURN(batches, ParseList("--prefill-batches", f.prefill_batches));
  std::vector<PrefillSample> samples;
  for (int len : lens) {
    for (int batch : batches) {
      if (batch > 1 && int64_t{batch} * len > f.max_batch_tokens) continue;
      std::vector<double> times;
      for (int rep = 0; rep < f.repeats; ++rep) {
        auto results = runner.Run(batch, len, 1);
        if (!results.ok()) return results.status();
        double slowest = 0;
        for (const auto& r : *results) slowest = std::max(slowest, r.ttft_s);
        times.push_back(slowest);
      }
      samples.push_back({std::vector<int64_t>(batch, len), Median(times)});
      std::fprintf(stderr, "prefill  batch %2d x %5d tokens: %8.2f ms\n", batch, len,
                   samples.back().seconds * 1e3);
    }
  }
  return samples;
}

// One step of `fresh` new tokens after a cached prefix: the cross term of the prefill model
// (attention to the context), which prompts without a prefix never exercise.
absl::Status MeasurePrefillAfterPrefix(Runner& runner, const ProfileFlags& f,
                                       std::vector<PrefillSample>& samples) {
  std::vector<int> contexts, lens;
  STRATA_ASSIGN_OR_RETURN(contexts, ParseList("--prefill-contexts", f.prefill_contexts));
  STRATA_ASSIGN_OR_RETURN(lens, ParseList("--prefill-context-lens", f.prefill_context_lens));
  for (int prefix : contexts) {
    if (prefix % replay::kTraceBlockTokens != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prefill-contexts: ", prefix, " is not a multiple of ", replay::kTraceBlockTokens));
    }
    for (int fresh : lens) {
      if (fresh > f.max_batch_tokens) continue;  // would take more than one step
      std::vector<double> times;
      int64_t cached = -1;
      for (int rep = 0; rep < f.repeats; ++rep) {
        STRATA_ASSIGN_OR_RETURN(RequestResult r, runner.RunAfterPrefix(prefix, fresh));
        times.push_back(r.ttft_s);
        cached = r.cached_tokens >= 0 ? r.cached_tokens : 0;  // what the worker really reused
      }
      const int64_t total = int64_t{prefix} + fresh;
      samples.push_back({{total - cached}, Median(times), {cached}});
      std::fprintf(stderr, "prefill  %5lld new after %5lld cached:  %8.2f ms\n",
                   static_cast<long long>(total - cached), static_cast<long long>(cached),
                   samples.back().seconds * 1e3);
    }
  }
  return absl::OkStatus();
}

// Median gap in the second half of one stream's tokens; -1 with too few tokens.
double SteadyStepSeconds(const RequestResult& r) {
  if (r.gaps_s.size() < 4) return -1;
  return Median(std::vector<double>(r.gaps_s.begin() + r.gaps_s.size() / 2, r.gaps_s.end()));
}

absl::StatusOr<std::vector<DecodeSample>> MeasureDecode(Runner& runner, const ProfileFlags& f) {
  std::vector<int> lens, batches;
  STRATA_ASSIGN_OR_RETURN(lens, ParseList("--decode-lens", f.decode_lens));
  STRATA_ASSIGN_OR_RETURN(batches, ParseList("--decode-batches", f.decode_batches));
  std::vector<DecodeSample> samples;
  for (int len : lens) {
    for (int batch : batches) {
      auto results = runner.Run(batch, len, f.decode_tokens);
      if (!results.ok()) return results.status();
      std::vector<double> steps;
      for (const auto& r : *results) {
        if (const double s = SteadyStepSeconds(r); s >= 0) steps.push_back(s);
      }
      if (steps.empty()) {
        return absl::UnavailableError("decode streams returned too few token chunks to time");
      }
      const int64_t context = int64_t{batch} * (len + f.decode_tokens * 3 / 4);
      samples.push_back({batch, context, Median(steps)});
      std::fprintf(stderr, "decode   batch %2d, context %6lld: %8.2f ms/step\n", batch,
                   static_cast<long long>(context), samples.back().seconds * 1e3);
    }
  }
  return samples;
}

// Bytes of one KV block: K and V of every layer, in the checkpoint's dtype.
absl::StatusOr<int64_t> KvBlockBytes(const std::string& model, int block_size) {
  if (model.empty()) return 0;
  auto dir = ResolveModelPath(model);
  if (!dir.ok()) return dir.status();
  auto config = ModelConfig::FromDirectory(*dir);
  if (!config.ok()) return config.status();
  const int64_t dtype_bytes = config->torch_dtype == "float32" ? 4 : 2;
  return 2 * int64_t{config->num_layers} * config->num_kv_heads * config->head_dim * block_size *
         dtype_bytes;
}

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

void FillLinks(const ProfileFlags& f, router::WorkerProfile& p) {
  const auto link = [](double gbps, double latency_s) {
    router::LinkModel l;
    l.measured = gbps > 0;
    if (l.measured) l = {gbps * 1e9, latency_s, true};
    return l;
  };
  p.kv_transfer = link(f.kv_transfer_gbps, f.kv_transfer_latency_us * 1e-6);
  p.tier_fetch[1] = link(f.host_gbps, 10e-6);
  p.tier_fetch[2] = link(f.disk_gbps, 100e-6);
  p.tier_fetch[3] = link(f.remote_gbps, 200e-6);
}

absl::StatusOr<router::WorkerProfile> Profile(const ProfileFlags& f) {
  auto url = replay::ParseServerUrl(f.url);
  if (!url.ok()) return url.status();
  std::string model = f.served_model;
  if (model.empty()) {
    auto info = replay::FetchModelInfo(*url, "");
    if (!info.ok()) return info.status();
    model = info->id;
  }
  auto replayer = replay::Replayer::Create({*url, model, "", 2, 120});
  if (!replayer.ok()) return replayer.status();
  Runner runner(replayer->get(), f.vocab_size, static_cast<uint64_t>(f.seed));
  router::WorkerProfile p;
  p.name = f.name;
  p.hardware = f.hardware;
  p.model = model;
  p.device = !f.device.empty() ? f.device : replay::FetchServerDevice(*url, "");
  // "cuda:NVIDIA H100 80GB HBM3 (device 0, sm_90)" describes every such GPU, not device 0 only.
  if (const size_t at = p.device.find(" (device "); at != std::string::npos) p.device.resize(at);
  if (p.device.empty()) {
    return absl::FailedPreconditionError(
        "the worker does not report its device in /server_info: pass --device");
  }
  p.measured_at = Today();
  p.block_size = f.block_size;
  p.num_kv_blocks = f.num_kv_blocks;
  p.max_batch_tokens = f.max_batch_tokens;
  p.max_running = f.max_running;
  STRATA_ASSIGN_OR_RETURN(p.kv_block_bytes, KvBlockBytes(f.model, f.block_size));
  FillLinks(f, p);
  std::vector<PrefillSample> prefill;
  STRATA_ASSIGN_OR_RETURN(prefill, MeasurePrefill(runner, f));
  STRATA_RETURN_IF_ERROR(MeasurePrefillAfterPrefix(runner, f, prefill));
  STRATA_ASSIGN_OR_RETURN(p.prefill, router::FitPrefill(prefill, &p.fit_r2_prefill));
  std::vector<DecodeSample> decode;
  STRATA_ASSIGN_OR_RETURN(decode, MeasureDecode(runner, f));
  STRATA_ASSIGN_OR_RETURN(p.decode, router::FitDecode(decode, &p.fit_r2_decode));
  return p;
}

}  // namespace

int RunProfile(const Args& args) {
  ProfileFlags f;
  ArgParser p("strata profile --url WORKER_HTTP_URL [--out FILE] [--name NAME]",
              "Measure a worker's prefill and decode step times through its OpenAI API and fit\n"
              "the latency models the goodput router and `strata sim` use (docs/routing.md).");
  AddFlags(p, f);
  if (auto s = p.Parse(args); !s.ok()) return Fail("profile", std::string(s.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (f.url.empty()) return Fail("profile", "--url is required", 2);
  if (f.repeats < 1 || f.decode_tokens < 8 || f.max_batch_tokens < 1 || f.block_size < 1) {
    return Fail("profile", "--repeats >= 1, --decode-tokens >= 8, sizes >= 1", 2);
  }
  signal(SIGPIPE, SIG_IGN);
  auto profile = Profile(f);
  if (!profile.ok()) {
    const bool usage = profile.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail("profile", std::string(profile.status().message()), usage ? 2 : 1);
  }
  std::fprintf(stderr, "prefill fit r2 = %.4f, decode fit r2 = %.4f\n", profile->fit_r2_prefill,
               profile->fit_r2_decode);
  if (f.out.empty()) {
    std::printf("%s", profile->ToJson().c_str());
    return 0;
  }
  if (auto s = WriteStringToFile(f.out, profile->ToJson()); !s.ok()) {
    return Fail("profile", std::string(s.message()), 1);
  }
  std::printf("profile written to %s\n", f.out.c_str());
  return 0;
}

}  // namespace strata::cli
