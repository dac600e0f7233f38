#pragma once
// Goodput of a simulated cluster, and `strata plan`: which prefill:decode split of N GPUs (or
// N mixed workers), and which chunked-prefill budget, serves a trace with the most goodput.
//
// Goodput here is `strata replay --find-goodput`'s: replay::FindGoodput scales the trace's
// arrival rate (the speedup) to the highest rate whose SLO attainment stays >= target, each
// probe one Simulate() of the windowed trace at that speedup.
//
// Split search: all splits P:(N-P) when N - 1 <= max_splits, else a grid of max_splits
// prefill counts spread over [1, N-1] and then the splits halfway between the best grid point
// and its neighbours. Candidates are evaluated in a fixed order, so a plan is deterministic.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/replay/goodput_search.h"
#include "strata/replay/report.h"
#include "strata/replay/trace.h"
#include "strata/replay/trace_options.h"
#include "strata/sim/simulator.h"

namespace strata::sim {

// One simulated run at `speedup` of the trace windowed by `window` (whose speedup is
// ignored), summarized against `slo`.
struct SimRun {
  SimResult sim;
  replay::ReplaySummary summary;
  replay::TraceSummary trace;
};
absl::StatusOr<SimRun> RunAtSpeedup(const std::vector<replay::TraceRequest>& trace,
                                    const replay::TraceOptions& window, const SimOptions& options,
                                    const replay::SloSpec& slo, double speedup,
                                    const SimProgress& progress = {});

// FindGoodput over RunAtSpeedup. `on_point` (may be empty) sees every probe.
using PointCallback = std::function<void(const SimRun&, const replay::GoodputPoint&)>;
absl::StatusOr<replay::GoodputSearchResult> SearchGoodput(
    const std::vector<replay::TraceRequest>& trace, const replay::TraceOptions& window,
    const SimOptions& options, const replay::SloSpec& slo,
    const replay::GoodputSearchOptions& search, const PointCallback& on_point = {});

struct PlanOptions {
  int gpus = 0;                        // >= 2 for a split (1 allows only aggregated)
  bool include_aggregated = true;      // also N mixed workers
  int max_splits = 7;                  // grid size before refinement
  std::vector<int64_t> chunk_budgets;  // max_batch_tokens candidates; empty: the profile's
  replay::SloSpec slo;
  replay::GoodputSearchOptions search;
};

struct PlanCandidate {
  ClusterShape shape;
  int64_t max_batch_tokens = 0;
  replay::GoodputSearchResult search;
  double goodput_rps() const { return search.best ? search.best->goodput_rps : 0.0; }
};

struct PlanResult {
  std::vector<PlanCandidate> candidates;  // in evaluation order
  int best = -1;  // index of the highest goodput (first on ties); -1 if nothing passed
};

// Prefill counts of the grid (see above), ascending.
std::vector<int> GridSplits(int gpus, int max_splits);

// `on_candidate` (may be empty) sees each candidate once evaluated. InvalidArgument for
// gpus < 1 or (gpus == 1 and !include_aggregated).
absl::StatusOr<PlanResult> Plan(const std::vector<replay::TraceRequest>& trace,
                                const replay::TraceOptions& window, const SimOptions& base,
                                const PlanOptions& options,
                                const std::function<void(const PlanCandidate&)>& on_candidate = {});

// The candidates as a table, the recommendation, and the Kubernetes replica counts for it
// (Deployments strata-prefill / strata-decode of deploy/k8s/base, namespace strata).
std::string FormatPlan(const PlanResult& plan, const PlanOptions& options);
std::string KubernetesSnippet(const ClusterShape& shape);

}  // namespace strata::sim
