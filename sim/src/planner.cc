#include "strata/sim/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::sim {

using replay::GoodputPoint;
using replay::GoodputSearchResult;

absl::StatusOr<SimRun> RunAtSpeedup(const std::vector<replay::TraceRequest>& trace,
                                    const replay::TraceOptions& window, const SimOptions& options,
                                    const replay::SloSpec& slo, double speedup,
                                    const SimProgress& progress) {
  SimRun run;
  replay::TraceOptions t = window;
  t.speedup = speedup;
  absl::StatusOr<std::vector<replay::TraceRequest>> requests =
      replay::ApplyTraceOptions(trace, t, &run.trace);
  if (!requests.ok()) return requests.status();
  if (requests->empty()) return absl::InvalidArgumentError("no request left to simulate");
  absl::StatusOr<SimResult> sim = Simulate(*requests, options, progress);
  if (!sim.ok()) return sim.status();
  run.sim = *std::move(sim);
  run.summary = replay::Summarize(run.sim.results, slo);
  return run;
}

absl::StatusOr<GoodputSearchResult> SearchGoodput(const std::vector<replay::TraceRequest>& trace,
                                                  const replay::TraceOptions& window,
                                                  const SimOptions& options,
                                                  const replay::SloSpec& slo,
                                                  const replay::GoodputSearchOptions& search,
                                                  const PointCallback& on_point) {
  auto evaluate = [&](double speedup) -> absl::StatusOr<GoodputPoint> {
    absl::StatusOr<SimRun> run = RunAtSpeedup(trace, window, options, slo, speedup);
    if (!run.ok()) return run.status();
    const double span = run->trace.span_s;
    GoodputPoint p{speedup, span > 0 ? static_cast<double>(run->trace.output_requests) / span : 0.0,
                   run->summary.slo_attainment, run->summary.goodput_rps};
    if (on_point) on_point(*run, p);
    return p;
  };
  return replay::FindGoodput(evaluate, search);
}

std::vector<int> GridSplits(int gpus, int max_splits) {
  std::vector<int> out;
  if (gpus < 2) return out;
  if (gpus - 1 <= max_splits) {
    for (int p = 1; p < gpus; ++p) out.push_back(p);
    return out;
  }
  for (int k = 1; k <= max_splits; ++k) {
    const int p = static_cast<int>(std::lround(static_cast<double>(gpus) * k / (max_splits + 1)));
    const int clamped = std::clamp(p, 1, gpus - 1);
    if (out.empty() || out.back() != clamped) out.push_back(clamped);
  }
  return out;
}

namespace {

// Prefill counts halfway between the best grid point and its grid neighbours.
std::vector<int> Refinements(const std::vector<int>& grid, int best_prefill) {
  std::vector<int> out;
  const auto it = std::find(grid.begin(), grid.end(), best_prefill);
  if (it == grid.end()) return out;
  if (it != grid.begin()) out.push_back((*(it - 1) + *it) / 2);
  if (it + 1 != grid.end()) out.push_back((*it + *(it + 1) + 1) / 2);
  std::erase_if(out, [&](int p) { return std::find(grid.begin(), grid.end(), p) != grid.end(); });
  return out;
}

}  // namespace

absl::StatusOr<PlanResult> Plan(const std::vector<replay::TraceRequest>& trace,
                                const replay::TraceOptions& window, const SimOptions& base,
                                const PlanOptions& options,
                                const std::function<void(const PlanCandidate&)>& on_candidate) {
  if (options.gpus < 1 || (options.gpus == 1 && !options.include_aggregated)) {
    return absl::InvalidArgumentError("--gpus must be >= 2 (or 1 with the aggregated option)");
  }
  std::vector<int64_t> budgets = options.chunk_budgets;
  if (budgets.empty()) budgets.push_back(base.profile.max_batch_tokens);
  PlanResult plan;
  auto evaluate = [&](ClusterShape shape, int64_t budget) -> absl::Status {
    SimOptions o = base;
    o.shape = shape;
    o.max_batch_tokens = budget;
    o.record_gaps = false;
    absl::StatusOr<GoodputSearchResult> r =
        SearchGoodput(trace, window, o, options.slo, options.search);
    if (!r.ok()) return r.status();
    plan.candidates.push_back(PlanCandidate{shape, budget, *std::move(r)});
    const int i = static_cast<int>(plan.candidates.size()) - 1;
    if (plan.candidates[i].search.best &&
        (plan.best < 0 ||
         plan.candidates[i].goodput_rps() > plan.candidates[plan.best].goodput_rps())) {
      plan.best = i;
    }
    if (on_candidate) on_candidate(plan.candidates[i]);
    return absl::OkStatus();
  };
  for (int64_t budget : budgets) {
    if (options.include_aggregated) {
      if (absl::Status st = evaluate(ClusterShape{0, 0, options.gpus}, budget); !st.ok()) return st;
    }
    const std::vector<int> grid = GridSplits(options.gpus, options.max_splits);
    int best_p = -1;
    double best_goodput = -1;
    for (int p : grid) {
      if (absl::Status st = evaluate(ClusterShape{p, options.gpus - p, 0}, budget); !st.ok())
        return st;
      if (plan.candidates.back().goodput_rps() > best_goodput) {
        best_goodput = plan.candidates.back().goodput_rps();
        best_p = p;
      }
    }
    for (int p : Refinements(grid, best_p)) {
      if (absl::Status st = evaluate(ClusterShape{p, options.gpus - p, 0}, budget); !st.ok())
        return st;
    }
  }
  return plan;
}

std::string KubernetesSnippet(const ClusterShape& shape) {
  // Aggregated: no prefill pool; decode-role workers prefill locally when the router places no
  // prefill worker (conditional disaggregation), which is what a mixed worker does.
  const int prefill = shape.aggregated() ? 0 : shape.prefill;
  const int decode = shape.aggregated() ? shape.mixed : shape.decode;
  return absl::StrFormat(
      "kubectl -n strata scale deployment/strata-prefill --replicas=%d\n"
      "kubectl -n strata scale deployment/strata-decode --replicas=%d\n"
      "# or, in your overlay's kustomization.yaml:\n"
      "replicas:\n"
      "  - name: strata-prefill\n"
      "    count: %d\n"
      "  - name: strata-decode\n"
      "    count: %d\n"
      "# (an HorizontalPodAutoscaler on these Deployments, as in overlays/gpu, overrides the "
      "counts: set its minReplicas instead)\n",
      prefill, decode, prefill, decode);
}

std::string FormatPlan(const PlanResult& plan, const PlanOptions& options) {
  std::string out = absl::StrFormat(
      "plan for %d GPUs, SLO TTFT <= %g s, TPOT <= %g s, attainment >= %.0f%%\n"
      "%-12s %10s %10s %12s %11s %13s %14s\n",
      options.gpus, options.slo.ttft_s, options.slo.tpot_s, options.search.target * 100, "split",
      "chunk", "speedup", "offered r/s", "attainment", "goodput r/s", "per GPU r/s");
  for (const PlanCandidate& c : plan.candidates) {
    if (c.search.best) {
      const GoodputPoint& b = *c.search.best;
      absl::StrAppendFormat(&out, "%-12s %10d %10.4g %12.3f %10.1f%% %13.3f %14.4f\n",
                            c.shape.ToString(), c.max_batch_tokens, b.speedup, b.offered_rps,
                            b.attainment * 100, b.goodput_rps, b.goodput_rps / c.shape.gpus());
    } else {
      absl::StrAppendFormat(&out, "%-12s %10d %10s %12s %11s %13s %14s\n", c.shape.ToString(),
                            c.max_batch_tokens, "-", "-", "none", "0", "0");
    }
  }
  if (plan.best < 0) {
    absl::StrAppend(&out, "no configuration met the SLO at any probed rate\n");
    return out;
  }
  const PlanCandidate& best = plan.candidates[plan.best];
  absl::StrAppendFormat(
      &out,
      "recommended: %s, chunked-prefill budget %d tokens "
      "(goodput %.3f req/s)\n",
      best.shape.aggregated()
          ? absl::StrCat(best.shape.mixed, " aggregated workers")
          : absl::StrCat(best.shape.prefill, " prefill + ", best.shape.decode, " decode workers"),
      best.max_batch_tokens, best.goodput_rps());
  absl::StrAppend(&out, KubernetesSnippet(best.shape));
  return out;
}

}  // namespace strata::sim
