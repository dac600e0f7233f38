#pragma once
// `--find-goodput`: the highest arrival-rate scale (speedup) at which SLO attainment stays at or
// above a target (DistServe's per-GPU goodput definition uses 90%).
//
// Search: evaluate `initial`; while it passes, double the speedup (up to max_speedup); while it
// fails, halve it (down to min_speedup). That brackets the answer between a passing `lo` and a
// failing `hi`; then bisect (geometric midpoint, since rates span orders of magnitude) until
// hi / lo <= 1 + rel_tolerance or max_evaluations are spent. Attainment is assumed to fall as the
// rate grows; a noisy, non-monotonic curve still ends with a passing `best` (or none) and every
// evaluated point is reported so a reader can see the noise.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::replay {

struct GoodputPoint {
  double speedup = 0;
  double offered_rps = 0;  // Requests / trace span at this speedup.
  double attainment = 0;   // 0..1.
  double goodput_rps = 0;
};

struct GoodputSearchOptions {
  double target = 0.9;
  double initial = 1.0;
  double min_speedup = 1.0 / 64;
  double max_speedup = 1024;
  double rel_tolerance = 0.05;
  int max_evaluations = 12;
};

struct GoodputSearchResult {
  std::vector<GoodputPoint> curve;  // Every evaluation, sorted by speedup.
  std::optional<GoodputPoint> best;  // Highest passing speedup; none if nothing passed.
};

// Runs `evaluate` (one replay at a speedup) as described above; its errors end the search.
// InvalidArgument for inconsistent options.
absl::StatusOr<GoodputSearchResult> FindGoodput(
    const std::function<absl::StatusOr<GoodputPoint>(double speedup)>& evaluate,
    const GoodputSearchOptions& options = {});

// The curve as a table (one line per point) and as an SVG chart of attainment vs offered rate.
std::string FormatGoodputCurve(const GoodputSearchResult& result, double target);
std::string GoodputPlotSvg(const GoodputSearchResult& result, double target);

}  // namespace strata::replay
