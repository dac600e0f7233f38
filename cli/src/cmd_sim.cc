// `strata sim`: a trace through a simulated cluster (the router's own placement and KV index,
// workers timed by a profile's latency models) -> the report of `strata replay`, summary.json,
// CSV/JSONL and plots with --out; --find-goodput as in replay.
// `strata plan`: the prefill:decode split (and chunked-prefill budget) of N GPUs with the most
// simulated goodput, and the Kubernetes replica counts for it. See docs/sim.md.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "args.h"
#include "commands.h"
#include "strata/replay/goodput_search.h"
#include "strata/replay/report.h"
#include "strata/replay/trace.h"
#include "strata/replay/trace_options.h"
#include "strata/sim/planner.h"
#include "strata/sim/simulator.h"

namespace strata::cli {
namespace {

using namespace strata::replay;  // NOLINT: this file is about traces and their reports.

// Flags shared by `sim` and `plan`: the trace, its window, the profile, the SLO and routing.
struct CommonFlags {
  std::string trace, format = "auto", profile, policy, clip = "truncate";
  double start = 0, duration = 0, slo_ttft = 2.0, slo_tpot = 0.1, target = 0.9;
  double heartbeat = 0.5, overlap_weight = 1.0;
  long long max_requests = 0, seed = 0, max_batch_tokens = 0, kv_blocks = 0;
  int max_output_tokens = 0, max_model_len = 0, max_evaluations = 10;
  int min_remote_prefill_tokens = 16, max_inflight = 256;
  int admission_queue = router::AdmissionOptions{}.capacity;
  bool quiet = false;
};

void AddCommonFlags(ArgParser& p, CommonFlags& f) {
  p.AddString("--trace", &f.trace, "trace file (required)");
  p.AddString("--format", &f.format, "mooncake | azure | burstgpt | strata | auto");
  p.AddString(
      "--profile", &f.profile,
      "worker profile (latency models, KV capacity); default: $STRATA_PROFILE, else the shipped "
      "tiny-llama-cpu.json (as `strata router`)");
  p.AddString("--policy", &f.policy, "routing policy (router --policy names)");
  p.AddDouble("--start", &f.start, "window start, seconds of trace time");
  p.AddDouble("--duration", &f.duration, "window length, seconds of trace time; 0 = to the end");
  p.AddInt64("--max-requests", &f.max_requests, "simulate at most N requests; 0 = all");
  p.AddInt("--max-output-tokens", &f.max_output_tokens, "clip output lengths to N; 0 = no clip");
  p.AddInt("--max-model-len", &f.max_model_len, "context limit; 0 = none");
  p.AddString("--clip", &f.clip, "requests over the context: truncate (the input) | skip");
  p.AddDouble("--slo-ttft", &f.slo_ttft, "TTFT SLO, seconds");
  p.AddDouble("--slo-tpot", &f.slo_tpot, "TPOT SLO, seconds");
  p.AddDouble("--target", &f.target, "attainment target of the goodput search");
  p.AddInt("--max-evaluations", &f.max_evaluations, "simulations one goodput search may run");
  p.AddInt64("--seed", &f.seed, "prompt block-hash seed");
  p.AddDouble("--heartbeat-interval", &f.heartbeat,
              "seconds between a worker's load/KV-event reports; 0 = the router sees them at once");
  p.AddInt64("--max-batch-tokens", &f.max_batch_tokens,
             "chunked-prefill token budget per step; 0 = the profile's");
  p.AddInt64("--kv-blocks", &f.kv_blocks,
             "G1 KV blocks per worker; 0 = the profile's (its 0: 256 MiB of blocks)");
  p.AddInt("--min-remote-prefill-tokens", &f.min_remote_prefill_tokens,
           "uncached tokens below which prefill stays on the decode worker");
  p.AddInt("--max-inflight-per-worker", &f.max_inflight, "outstanding requests before 429");
  p.AddDouble("--overlap-weight", &f.overlap_weight, "kv-cost: weight of blocks to prefill");
  p.AddInt("--admission-queue", &f.admission_queue,
           "goodput: requests that may wait for a placement meeting their SLO (0: 429 at once)");
  p.AddBool("--quiet", &f.quiet, "no progress line");
}

absl::Status ValidateCommon(const CommonFlags& f) {
  if (f.trace.empty()) return absl::InvalidArgumentError("--trace is required");
  if (!(f.start >= 0) || !(f.duration >= 0)) {
    return absl::InvalidArgumentError("--start and --duration must be >= 0");
  }
  if (!(f.slo_ttft > 0) || !(f.slo_tpot > 0)) {
    return absl::InvalidArgumentError("--slo-ttft and --slo-tpot must be > 0");
  }
  if (f.max_requests < 0 || f.max_output_tokens < 0 || f.max_model_len < 0 ||
      f.max_batch_tokens < 0 || f.kv_blocks < 0 || f.min_remote_prefill_tokens < 0 ||
      f.max_inflight < 1 || f.admission_queue < 0) {
    return absl::InvalidArgumentError("counts must be >= 0 (--max-inflight-per-worker >= 1)");
  }
  if (f.clip != "truncate" && f.clip != "skip") {
    return absl::InvalidArgumentError("--clip must be truncate or skip");
  }
  if (!(f.target > 0 && f.target <= 1) || f.max_evaluations < 1 || !(f.heartbeat >= 0)) {
    return absl::InvalidArgumentError(
        "--target in (0, 1], --max-evaluations >= 1, --heartbeat-interval >= 0");
  }
  return absl::OkStatus();
}

// Everything a run needs, prepared once: the trace (outputs clipped), its window, the options.
struct Setup {
  std::vector<TraceRequest> trace;
  TraceOptions window;
  sim::SimOptions options;
  SloSpec slo;
};

absl::StatusOr<Setup> Prepare(const CommonFlags& f, const std::string& default_policy) {
  Setup s;
  absl::StatusOr<router::WorkerProfile> profile =
      router::WorkerProfile::Load(f.profile.empty() ? router::DefaultProfilePath() : f.profile);
  if (!profile.ok()) return absl::InvalidArgumentError(profile.status().message());
  s.options.profile = *std::move(profile);
  if (f.kv_blocks > 0) s.options.profile.num_kv_blocks = f.kv_blocks;
  s.options.placement.policy = f.policy.empty() ? default_policy : f.policy;
  s.options.placement.min_remote_prefill_tokens = f.min_remote_prefill_tokens;
  s.options.placement.max_inflight_per_worker = f.max_inflight;
  s.options.placement.overlap_weight = f.overlap_weight;
  s.options.admission.capacity = f.admission_queue;
  s.options.placement.slo = {f.slo_ttft, f.slo_tpot};  // goodput places against these
  s.options.placement.profile = s.options.profile;
  if (auto placer = router::Placer::Create(s.options.placement); !placer.ok()) {
    return placer.status();
  }
  s.options.seed = static_cast<uint64_t>(f.seed);
  s.options.heartbeat_interval_s = f.heartbeat;
  s.options.max_batch_tokens = f.max_batch_tokens;
  absl::StatusOr<std::vector<TraceRequest>> trace = LoadTrace(f.trace, f.format);
  if (!trace.ok()) return trace.status();
  s.trace = *std::move(trace);
  for (TraceRequest& r : s.trace) {  // at least one output token: a request without one has no TTFT
    if (f.max_output_tokens > 0) r.output_tokens = std::min(r.output_tokens, f.max_output_tokens);
    r.output_tokens = std::max(r.output_tokens, 1);
  }
  s.window.start_s = f.start;
  if (f.duration > 0) s.window.duration_s = f.duration;
  s.window.max_requests = f.max_requests;
  s.window.max_model_len = f.max_model_len;
  s.window.clip_policy = f.clip == "skip" ? ClipPolicy::kSkip : ClipPolicy::kTruncateInput;
  s.slo = {f.slo_ttft, f.slo_tpot};
  // Said once the run is set up, so a usage error stays the one line it is.
  if (const auto missing = s.options.profile.UnmeasuredLinks(); !missing.empty()) {
    std::fprintf(stderr,
                 "strata sim: profile '%s' has no measured %s: priced at 1 GB/s, no latency\n",
                 s.options.profile.name.c_str(), absl::StrJoin(missing, ", ").c_str());
  }
  return s;
}

int PrepareError(const char* cmd, const absl::Status& st) {
  const bool usage =
      st.code() == absl::StatusCode::kInvalidArgument || st.code() == absl::StatusCode::kNotFound;
  return Fail(cmd, std::string(st.message()), usage ? 2 : 1);
}

GoodputSearchOptions SearchOptions(const CommonFlags& f, double initial) {
  GoodputSearchOptions o;
  o.target = f.target;
  o.initial = initial;
  o.min_speedup = std::min(initial, 1.0 / 64);
  o.max_speedup = std::max(initial, 1024.0);
  o.max_evaluations = f.max_evaluations;
  return o;
}

// "\r"-rewritten on a terminal, a plain line every ~5 s otherwise.
class Progress {
 public:
  explicit Progress(bool quiet)
      : quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}
  void Update(int64_t done, int64_t total, double simulated_s) {
    const double elapsed = Elapsed();
    if (quiet_ || (elapsed - last_ < (tty_ ? 0.2 : 5.0) && done < total)) return;
    last_ = elapsed;
    std::fprintf(stderr, "%s[sim] %6.1fs  finished %lld/%lld  simulated %.1f s%s", tty_ ? "\r" : "",
                 elapsed, static_cast<long long>(done), static_cast<long long>(total), simulated_s,
                 tty_ ? "   " : "\n");
    std::fflush(stderr);
  }
  void End() {
    if (!quiet_ && tty_ && last_ >= 0) std::fprintf(stderr, "\n");
  }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_;
  double last_ = -1e9;
};

std::string TraceLine(const TraceSummary& t) {
  return absl::StrFormat(
      "trace: %d requests read, %d outside the window, %d over --max-requests, %d inputs "
      "truncated and %d skipped for the context limit; simulating %d over %.2f s\n",
      t.input_requests, t.outside_window, t.over_limit, t.clipped, t.skipped, t.output_requests,
      t.span_s);
}

std::string SimLine(const sim::SimOptions& o, const sim::SimStats& s, double wall_s) {
  return absl::StrFormat(
      "sim: %s (%d GPUs), policy %s, profile %s; %d remote prefills, %d rejected, %d queued "
      "(%d placed from the queue, %d out of slack, %d queue full), %d KV events, "
      "%d evictions, %d engine steps, %d events; %.1f s simulated in %.2f s\n",
      o.shape.ToString(), o.shape.gpus(), o.placement.policy, o.profile.name, s.remote_prefills,
      s.rejected, s.queued, s.queue_placed, s.slack_expired, s.queue_full, s.kv_events,
      s.evictions, s.steps, s.events, s.simulated_s, wall_s);
}

struct SimFlags {
  CommonFlags common;
  int prefill = 0, decode = 0, workers = 0;
  bool aggregated = false, find_goodput = false, colocated = false;
  double speedup = 1;
  std::string out;
};

absl::Status ShapeFrom(const SimFlags& f, sim::ClusterShape* shape) {
  if (f.prefill < 0 || f.decode < 0 || f.workers < 0) {
    return absl::InvalidArgumentError("worker counts must be >= 0");
  }
  if (f.colocated && (f.aggregated || f.prefill != f.decode)) {
    return absl::InvalidArgumentError(
        "--colocated pairs prefill and decode workers: give --prefill N --decode N");
  }
  if (f.aggregated) {
    if (f.prefill > 0 || f.decode > 0) {
      return absl::InvalidArgumentError("--aggregated takes --workers N, not --prefill/--decode");
    }
    if (f.workers < 1) return absl::InvalidArgumentError("--aggregated needs --workers N >= 1");
    *shape = {0, 0, f.workers};
    return absl::OkStatus();
  }
  if (f.workers > 0) return absl::InvalidArgumentError("--workers needs --aggregated");
  if (f.decode < 1) {
    return absl::InvalidArgumentError(
        "give --prefill P --decode D (D >= 1) or --aggregated --workers N");
  }
  *shape = {f.prefill, f.decode, 0, f.colocated};
  return absl::OkStatus();
}

int SimOnce(const SimFlags& f, const Setup& s) {
  Progress progress(f.common.quiet);
  absl::StatusOr<sim::SimRun> run = sim::RunAtSpeedup(
      s.trace, s.window, s.options, s.slo, f.speedup,
      [&](int64_t done, int64_t total, double t) { progress.Update(done, total, t); });
  progress.End();
  if (!run.ok()) return PrepareError("sim", run.status());
  std::printf("%s%s%s", TraceLine(run->trace).c_str(), FormatSummary(run->summary).c_str(),
              SimLine(s.options, run->sim.stats, progress.Elapsed()).c_str());
  if (!f.out.empty()) {
    if (absl::Status st = WriteReport(f.out, run->sim.results, run->summary); !st.ok()) {
      return Fail("sim", std::string(st.message()), 1);
    }
    std::printf("results written to %s\n", f.out.c_str());
  }
  return 0;
}

int SimGoodput(const SimFlags& f, const Setup& s) {
  auto on_point = [&](const sim::SimRun& run, const GoodputPoint& p) {
    std::fprintf(stderr, "[find-goodput] speedup %.4g: %.3f req/s offered, attainment %.1f%%\n",
                 p.speedup, p.offered_rps, p.attainment * 100);
    if (!f.out.empty()) {
      const std::string dir = absl::StrFormat("%s/speedup_%.4g", f.out, p.speedup);
      if (absl::Status st = WriteReport(dir, run.sim.results, run.summary); !st.ok()) {
        std::fprintf(stderr, "strata sim: %s\n", std::string(st.message()).c_str());
      }
    }
  };
  absl::StatusOr<GoodputSearchResult> result = sim::SearchGoodput(
      s.trace, s.window, s.options, s.slo, SearchOptions(f.common, f.speedup), on_point);
  if (!result.ok()) return PrepareError("sim", result.status());
  std::printf("%s", FormatGoodputCurve(*result, f.common.target).c_str());
  if (!f.out.empty()) {
    std::ofstream(f.out + "/goodput.svg") << GoodputPlotSvg(*result, f.common.target);
    std::printf("curve plot written to %s/goodput.svg\n", f.out.c_str());
  }
  return 0;
}

}  // namespace

int RunSim(const Args& args) {
  SimFlags f;
  ArgParser p(
      "strata sim --trace FILE (--prefill P --decode D | --aggregated --workers N) "
      "[--policy NAME] [--profile FILE] [--speedup X] [--slo-ttft S --slo-tpot S] "
      "[--find-goodput] [--out DIR]",
      "Simulate a request trace on a cluster of any size with the router's own placement\n"
      "code and report what `strata replay` reports (see docs/sim.md).");
  AddCommonFlags(p, f.common);
  p.AddInt("--prefill", &f.prefill, "prefill workers (disaggregated)");
  p.AddInt("--decode", &f.decode, "decode workers (disaggregated)");
  p.AddBool("--aggregated", &f.aggregated, "mixed workers only (with --workers N)");
  p.AddInt("--workers", &f.workers, "mixed workers of --aggregated");
  p.AddBool("--colocated", &f.colocated,
            "prefill worker i and decode worker i share one GPU (time-sliced)");
  p.AddDouble("--speedup", &f.speedup, "arrival-rate scale: 2 simulates twice the rate");
  p.AddBool("--find-goodput", &f.find_goodput,
            "search the speedup for the highest rate with >= --target attainment");
  p.AddString("--out", &f.out, "write summary.json, requests.csv/.jsonl and SVG plots here");
  if (auto st = p.Parse(args); !st.ok()) return Fail("sim", std::string(st.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  sim::ClusterShape shape;
  if (auto st = ValidateCommon(f.common); !st.ok())
    return Fail("sim", std::string(st.message()), 2);
  if (auto st = ShapeFrom(f, &shape); !st.ok()) return Fail("sim", std::string(st.message()), 2);
  if (!(f.speedup > 0) || !std::isfinite(f.speedup)) return Fail("sim", "--speedup must be > 0", 2);
  absl::StatusOr<Setup> setup = Prepare(f.common, "kv-aware");
  if (!setup.ok()) return PrepareError("sim", setup.status());
  setup->options.shape = shape;
  return f.find_goodput ? SimGoodput(f, *setup) : SimOnce(f, *setup);
}

namespace {

absl::Status ParseBudgets(const std::string& text, std::vector<int64_t>* out) {
  if (text.empty()) return absl::OkStatus();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("bad --chunk-budgets entry '", part, "'"));
    }
    out->push_back(v);
  }
  return absl::OkStatus();
}

}  // namespace

int RunPlan(const Args& args) {
  CommonFlags f;
  int gpus = 0, max_splits = 7;
  std::string budgets;
  bool no_aggregated = false;
  ArgParser p(
      "strata plan --trace FILE --gpus N [--slo-ttft S --slo-tpot S] [--policy NAME] "
      "[--profile FILE] [--chunk-budgets T1,T2]",
      "Search prefill:decode splits of N GPUs (and N aggregated workers) in the simulator\n"
      "for the highest goodput; print the recommendation and its Kubernetes replicas.");
  AddCommonFlags(p, f);
  p.AddInt("--gpus", &gpus, "GPUs (workers) to split (required)");
  p.AddInt("--max-splits", &max_splits, "grid of prefill counts tried before refining");
  p.AddString("--chunk-budgets", &budgets, "comma-separated chunked-prefill budgets to try");
  p.AddBool("--no-aggregated", &no_aggregated, "skip the aggregated (mixed) candidate");
  if (auto st = p.Parse(args); !st.ok()) return Fail("plan", std::string(st.message()), 2);
  if (p.help_requested()) {
    std::printf("%s", p.Help().c_str());
    return 0;
  }
  sim::PlanOptions options;
  if (auto st = ValidateCommon(f); !st.ok()) return Fail("plan", std::string(st.message()), 2);
  if (auto st = ParseBudgets(budgets, &options.chunk_budgets); !st.ok()) {
    return Fail("plan", std::string(st.message()), 2);
  }
  if (gpus < 1 || (gpus == 1 && no_aggregated) || max_splits < 1) {
    return Fail("plan",
                "--gpus must be >= 2 (1 only with the aggregated candidate), "
                "--max-splits >= 1",
                2);
  }
  absl::StatusOr<Setup> setup = Prepare(f, "goodput");
  if (!setup.ok()) return PrepareError("plan", setup.status());
  options.gpus = gpus;
  options.include_aggregated = !no_aggregated;
  options.max_splits = max_splits;
  options.slo = setup->slo;
  options.search = SearchOptions(f, 1.0);
  Progress clock(true);
  absl::StatusOr<sim::PlanResult> plan = sim::Plan(
      setup->trace, setup->window, setup->options, options, [&](const sim::PlanCandidate& c) {
        if (f.quiet) return;
        std::fprintf(stderr, "[plan] %7.1fs  %s chunk %lld: goodput %.3f req/s\n", clock.Elapsed(),
                     c.shape.ToString().c_str(), static_cast<long long>(c.max_batch_tokens),
                     c.goodput_rps());
      });
  if (!plan.ok()) return PrepareError("plan", plan.status());
  std::printf("%s", sim::FormatPlan(*plan, options).c_str());
  return 0;
}

}  // namespace strata::cli
