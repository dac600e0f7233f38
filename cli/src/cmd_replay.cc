// `strata replay`: trace file -> parsed, windowed, clipped, sped-up requests -> open-loop replay
// against --url -> summary (stdout), results and plots (--out DIR). With --find-goodput, one
// replay per probed speedup and the attainment-vs-rate curve.
#include "cmd_replay.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "args.h"
#include "strata/replay/goodput_search.h"
#include "strata/replay/replayer.h"
#include "strata/replay/report.h"
#include "strata/replay/trace.h"
#include "strata/replay/trace_options.h"

namespace strata::cli {
namespace {

using namespace strata::replay;  // NOLINT: this file is the replay command.

// Used when the server does not report its vocabulary (strata's /v1/models doesn't): the
// smallest vocabulary of any preset, so ids are valid for every model.
constexpr int kFallbackVocab = 1024;

struct ReplayFlags {
  std::string trace, format = "auto", url, ca, model, api_key, out, clip = "truncate";
  std::string prompt_source = "auto";
  double speedup = 1, start = 0, duration = 0, slo_ttft = 2.0, slo_tpot = 0.1;
  double timeout = 600, target = 0.9;
  long long max_requests = 0, seed = 0;
  int max_output_tokens = 0, vocab_size = 0, max_model_len = 0, threads = 2;
  int system_prompt_tokens = 0, max_evaluations = 10, attempts = 4;
  bool find_goodput = false, reseed_probes = false, quiet = false;
};

void AddFlags(ArgParser& p, ReplayFlags& f) {
  p.AddString("--trace", &f.trace, "trace file (required)");
  p.AddString("--format", &f.format, "mooncake | azure | burstgpt | strata | auto");
  p.AddString("--url", &f.url, "server, http[s]://HOST:PORT[/v1] (required)");
  p.AddString("--ca", &f.ca,
              "https: CA certificate(s) (PEM) that verify the server; default: the system's");
  p.AddString("--model", &f.model, "served model name; default: the first of GET /v1/models");
  p.AddString("--api-key", &f.api_key, "sent as Authorization: Bearer KEY");
  p.AddDouble("--speedup", &f.speedup, "arrival-rate scale: 2 replays twice as fast");
  p.AddDouble("--start", &f.start, "window start, seconds of trace time");
  p.AddDouble("--duration", &f.duration, "window length, seconds of trace time; 0 = to the end");
  p.AddInt64("--max-requests", &f.max_requests, "replay at most N requests; 0 = all");
  p.AddInt("--max-output-tokens", &f.max_output_tokens, "clip output lengths to N; 0 = no clip");
  p.AddDouble("--slo-ttft", &f.slo_ttft, "TTFT SLO, seconds");
  p.AddDouble("--slo-tpot", &f.slo_tpot, "TPOT SLO, seconds");
  p.AddString("--out", &f.out, "write summary.json, requests.csv/.jsonl and SVG plots here");
  p.AddInt("--vocab-size", &f.vocab_size,
           "token ids are drawn from [0, N); default: the server's, else 1024");
  p.AddInt("--max-model-len", &f.max_model_len, "context limit; default: the server's");
  p.AddString("--clip", &f.clip, "requests over the context: truncate (the input) | skip");
  p.AddInt("--system-prompt-tokens", &f.system_prompt_tokens,
           "shared system prompt for traces without block ids (Azure, BurstGPT)");
  p.AddInt64("--seed", &f.seed, "prompt synthesis seed");
  p.AddString("--prompt-source", &f.prompt_source,
              "auto (the trace's prompt text where it has one, else token ids) | tokens | text");
  p.AddDouble("--timeout", &f.timeout, "per-request timeout, seconds");
  p.AddInt("--threads", &f.threads, "I/O threads");
  p.AddInt("--attempts", &f.attempts,
           "tries per request on connection errors, with an Idempotency-Key and Last-Event-ID "
           "so that a retry resumes the request (1: no retries)");
  p.AddBool("--find-goodput", &f.find_goodput,
            "binary-search the speedup for the highest rate with >= --target attainment");
  p.AddDouble("--target", &f.target, "attainment target of --find-goodput");
  p.AddInt("--max-evaluations", &f.max_evaluations, "replays --find-goodput may run");
  p.AddBool("--reseed-probes", &f.reseed_probes,
            "--find-goodput: probe k draws its prompts with seed --seed + k (recorded text "
            "gets a first line naming it), so that no probe finds an earlier probe's prompts "
            "in the server's prefix cache");
  p.AddBool("--quiet", &f.quiet, "no progress line");
}

absl::Status Validate(const ReplayFlags& f) {
  if (f.trace.empty()) return absl::InvalidArgumentError("--trace is required");
  if (f.url.empty()) return absl::InvalidArgumentError("--url is required");
  if (!(f.speedup > 0) || !std::isfinite(f.speedup)) {
    return absl::InvalidArgumentError("--speedup must be > 0");
  }
  if (!(f.start >= 0) || !(f.duration >= 0)) {
    return absl::InvalidArgumentError("--start and --duration must be >= 0");
  }
  if (!(f.slo_ttft > 0) || !(f.slo_tpot > 0)) {
    return absl::InvalidArgumentError("--slo-ttft and --slo-tpot must be > 0");
  }
  if (f.max_requests < 0 || f.max_output_tokens < 0 || f.vocab_size < 0 || f.max_model_len < 0 ||
      f.system_prompt_tokens < 0) {
    return absl::InvalidArgumentError("counts must be >= 0");
  }
  if (f.clip != "truncate" && f.clip != "skip") {
    return absl::InvalidArgumentError("--clip must be truncate or skip");
  }
  if (absl::StatusOr<PromptSource> source = ParsePromptSource(f.prompt_source); !source.ok()) {
    return source.status();
  }
  if (!(f.timeout > 0) || f.threads < 1 || !(f.target > 0 && f.target <= 1)) {
    return absl::InvalidArgumentError("--timeout > 0, --threads >= 1, --target in (0, 1]");
  }
  return absl::OkStatus();
}

// Everything a replay at one speedup needs, prepared once.
struct Plan {
  std::vector<TraceRequest> trace;  // Output-clipped, not yet windowed.
  TraceOptions options;
  std::unique_ptr<Replayer> replayer;
  std::optional<PromptSynthesizer> prompts;
  int vocab = 0;  // The ids prompts are drawn from: [0, vocab).
  SloSpec slo;
};

// Replaces the plan's prompt synthesizer with one drawing from `seed`.
absl::Status Reseed(Plan& plan, const ReplayFlags& f, uint64_t seed) {
  auto prompts = PromptSynthesizer::Create(plan.vocab, {}, seed, f.system_prompt_tokens);
  if (!prompts.ok()) return prompts.status();
  plan.prompts.emplace(*std::move(prompts));
  return absl::OkStatus();
}

// Recorded prompt text, which no seed changes, starts with a line naming the probe's seed, so
// that a probe shares no prefix with another's (its own requests still share theirs).
void SaltRecordedPrompts(const std::vector<TraceRequest>& recorded, uint64_t seed,
                         std::vector<TraceRequest>& trace) {
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!recorded[i].prompt.empty()) {
      trace[i].prompt = absl::StrCat("probe ", seed, "\n", recorded[i].prompt);
    }
  }
}

// --max-output-tokens, and at least one output token (a request without one has no TTFT).
void ClipOutputs(std::vector<TraceRequest>& trace, int max_output_tokens) {
  for (TraceRequest& r : trace) {
    if (max_output_tokens > 0) r.output_tokens = std::min(r.output_tokens, max_output_tokens);
    r.output_tokens = std::max(r.output_tokens, 1);
  }
}

absl::StatusOr<Plan> Prepare(const ReplayFlags& f) {
  Plan plan;
  absl::StatusOr<std::vector<TraceRequest>> trace = LoadTrace(f.trace, f.format);
  if (!trace.ok()) return trace.status();
  plan.trace = *std::move(trace);
  ClipOutputs(plan.trace, f.max_output_tokens);
  absl::StatusOr<ServerUrl> url = ParseServerUrl(f.url);
  if (!url.ok()) return url.status();
  if (!f.ca.empty() && !url->tls) return absl::InvalidArgumentError("--ca needs an https:// --url");
  url->ca_file = f.ca;
  absl::StatusOr<ModelInfo> info = FetchModelInfo(*url, f.api_key);
  if (!info.ok()) return info.status();
  int vocab = f.vocab_size > 0 ? f.vocab_size : info->vocab_size;
  if (vocab <= 0) {
    vocab = kFallbackVocab;
    std::fprintf(stderr,
                 "strata replay: the server does not report its vocabulary size; "
                 "drawing token ids from [0, %d) (set --vocab-size)\n",
                 vocab);
  }
  plan.vocab = vocab;
  if (absl::Status st = Reseed(plan, f, static_cast<uint64_t>(f.seed)); !st.ok()) return st;
  plan.options.start_s = f.start;
  if (f.duration > 0) plan.options.duration_s = f.duration;
  plan.options.max_requests = f.max_requests;
  plan.options.max_model_len = f.max_model_len > 0 ? f.max_model_len : info->max_model_len;
  plan.options.clip_policy = f.clip == "skip" ? ClipPolicy::kSkip : ClipPolicy::kTruncateInput;
  absl::StatusOr<std::unique_ptr<Replayer>> replayer =
      Replayer::Create({*url, f.model.empty() ? info->id : f.model, f.api_key, f.threads, f.timeout,
                        *ParsePromptSource(f.prompt_source), f.attempts});
  if (!replayer.ok()) return replayer.status();
  plan.replayer = *std::move(replayer);
  plan.slo = {f.slo_ttft, f.slo_tpot};
  return plan;
}

// The live progress line: "\r"-rewritten on a terminal, a plain line every ~5 s otherwise.
class ProgressLine {
 public:
  ProgressLine(int64_t total, SloSpec slo, bool quiet)
      : total_(total),
        slo_(slo),
        quiet_(quiet),
        tty_(isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  void Update(const ReplayProgress& p, const std::vector<const RequestResult*>& finished) {
    for (const RequestResult* r : finished) met_ += MeetsSlo(*r, slo_) ? 1 : 0;
    const int64_t done = p.done.load();
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (quiet_ || (!tty_ && elapsed - last_print_ < 5.0 && done < total_)) return;
    last_print_ = elapsed;
    std::fprintf(stderr,
                 "%s[replay] %6.1fs  sent %lld/%lld  done %lld  errors %lld  "
                 "attainment %s%s",
                 tty_ ? "\r" : "", elapsed, static_cast<long long>(p.sent.load()),
                 static_cast<long long>(total_), static_cast<long long>(done),
                 static_cast<long long>(p.errors.load()),
                 done > 0 ? absl::StrFormat("%.1f%%", 100.0 * met_ / done).c_str() : "-",
                 tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
  void End() {
    if (!quiet_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_;
  SloSpec slo_;
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_;
  int64_t met_ = 0;
  double last_print_ = -1e9;
};

struct RunOutcome {
  std::vector<RequestResult> results;
  ReplaySummary summary;
  TraceSummary trace;
};

absl::StatusOr<RunOutcome> ReplayOnce(Plan& plan, double speedup, bool quiet) {
  RunOutcome out;
  TraceOptions options = plan.options;
  options.speedup = speedup;
  absl::StatusOr<std::vector<TraceRequest>> requests =
      ApplyTraceOptions(plan.trace, options, &out.trace);
  if (!requests.ok()) return requests.status();
  if (requests->empty()) return absl::InvalidArgumentError("no request left to replay");
  ProgressLine line(static_cast<int64_t>(requests->size()), plan.slo, quiet);
  auto on_progress = [&](const ReplayProgress& p, const std::vector<const RequestResult*>& f) {
    line.Update(p, f);
  };
  absl::StatusOr<std::vector<RequestResult>> results =
      plan.replayer->Run(*requests, *plan.prompts, on_progress);
  line.End();
  if (!results.ok()) return results.status();
  out.results = *std::move(results);
  out.summary = Summarize(out.results, plan.slo);
  return out;
}

std::string TraceLine(const TraceSummary& t) {
  return absl::StrFormat(
      "trace: %d requests read, %d outside the window, %d over --max-requests, %d inputs "
      "truncated and %d skipped for the context limit; replaying %d over %.2f s\n",
      t.input_requests, t.outside_window, t.over_limit, t.clipped, t.skipped, t.output_requests,
      t.span_s);
}

int ReplayMain(const ReplayFlags& f, Plan& plan) {
  absl::StatusOr<RunOutcome> run = ReplayOnce(plan, f.speedup, f.quiet);
  if (!run.ok()) return Fail("replay", std::string(run.status().message()), 1);
  std::printf("%s%s", TraceLine(run->trace).c_str(), FormatSummary(run->summary).c_str());
  if (!f.out.empty()) {
    if (absl::Status st = WriteReport(f.out, run->results, run->summary); !st.ok()) {
      return Fail("replay", std::string(st.message()), 1);
    }
    std::printf("results written to %s\n", f.out.c_str());
  }
  return 0;
}

int GoodputMain(const ReplayFlags& f, Plan& plan) {
  const std::vector<TraceRequest> recorded = plan.trace;
  uint64_t probe = 0;
  auto evaluate = [&](double speedup) -> absl::StatusOr<GoodputPoint> {
    if (f.reseed_probes) {
      const uint64_t seed = static_cast<uint64_t>(f.seed) + probe;
      if (absl::Status st = Reseed(plan, f, seed); !st.ok()) return st;
      SaltRecordedPrompts(recorded, seed, plan.trace);
    }
    ++probe;
    std::fprintf(stderr, "[find-goodput] replaying at speedup %.4g\n", speedup);
    absl::StatusOr<RunOutcome> run = ReplayOnce(plan, speedup, f.quiet);
    if (!run.ok()) return run.status();
    const double span = run->trace.span_s;
    GoodputPoint p{speedup, span > 0 ? run->trace.output_requests / span : 0.0,
                   run->summary.slo_attainment, run->summary.goodput_rps};
    std::fprintf(stderr, "[find-goodput] speedup %.4g: %.3f req/s offered, attainment %.1f%%\n",
                 speedup, p.offered_rps, p.attainment * 100);
    if (!f.out.empty()) {
      const std::string dir = absl::StrFormat("%s/speedup_%.4g", f.out, speedup);
      if (absl::Status st = WriteReport(dir, run->results, run->summary); !st.ok()) return st;
    }
    return p;
  };
  GoodputSearchOptions options;
  options.target = f.target;
  options.initial = f.speedup;
  options.min_speedup = std::min(f.speedup, 1.0 / 64);
  options.max_speedup = std::max(f.speedup, 1024.0);
  options.max_evaluations = std::max(1, f.max_evaluations);
  absl::StatusOr<GoodputSearchResult> result = FindGoodput(evaluate, options);
  if (!result.ok()) return Fail("replay", std::string(result.status().message()), 1);
  std::printf("%s", FormatGoodputCurve(*result, f.target).c_str());
  if (!f.out.empty()) {
    std::ofstream(f.out + "/goodput.svg") << GoodputPlotSvg(*result, f.target);
    std::printf("curve plot written to %s/goodput.svg\n", f.out.c_str());
  }
  return 0;
}

}  // namespace

int RunReplay(const Args& args) {
  ReplayFlags f;
  ArgParser p(
      "strata replay --trace FILE --url URL [--format F] [--speedup X] [--start S] "
      "[--duration D] [--max-requests N] [--slo-ttft S] [--slo-tpot S] [--out DIR]",
      "Replay a request trace open-loop against an OpenAI-compatible server and report\n"
      "TTFT/TPOT percentiles, SLO attainment and goodput (see docs/replay.md).");
  AddFlags(p, f);
  if (auto st = p.Parse(args); !st.ok()) return Fail("replay", std::string(st.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  if (auto st = Validate(f); !st.ok()) return Fail("replay", std::string(st.message()), 2);
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<Plan> plan = Prepare(f);
  if (!plan.ok()) {
    const bool usage = plan.status().code() == absl::StatusCode::kInvalidArgument;
    return Fail("replay", std::string(plan.status().message()), usage ? 2 : 1);
  }
  return f.find_goodput ? GoodputMain(f, *plan) : ReplayMain(f, *plan);
}

}  // namespace strata::cli
