#include "strata/replay/goodput_search.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "strata/replay/svg_plot.h"

namespace strata::replay {

absl::StatusOr<GoodputSearchResult> FindGoodput(
    const std::function<absl::StatusOr<GoodputPoint>(double speedup)>& evaluate,
    const GoodputSearchOptions& o) {
  if (!(o.min_speedup > 0) || !(o.min_speedup <= o.initial) || !(o.initial <= o.max_speedup) ||
      !(o.rel_tolerance > 0) || o.max_evaluations < 1 || !(o.target > 0 && o.target <= 1)) {
    return absl::InvalidArgumentError("goodput search: inconsistent options");
  }
  GoodputSearchResult result;
  int evaluations = 0;
  auto run = [&](double speedup) -> absl::StatusOr<bool> {
    absl::StatusOr<GoodputPoint> p = evaluate(speedup);
    if (!p.ok()) return p.status();
    ++evaluations;
    result.curve.push_back(*p);
    const bool pass = p->attainment >= o.target;
    if (pass && (!result.best || p->speedup > result.best->speedup)) result.best = *p;
    return pass;
  };
  double lo = 0, hi = 0;  // lo passes, hi fails (0 = unknown).
  double s = o.initial;
  while (evaluations < o.max_evaluations) {
    absl::StatusOr<bool> pass = run(s);
    if (!pass.ok()) return pass.status();
    if (*pass) {
      lo = s;
    } else {
      hi = s;
    }
    if (lo > 0 && hi > 0) break;
    if (*pass && s * 2 > o.max_speedup) break;  // Passes even at the maximum.
    if (!*pass && s / 2 < o.min_speedup) break;  // Fails even at the minimum.
    s = *pass ? s * 2 : s / 2;
  }
  while (lo > 0 && hi > 0 && hi / lo > 1 + o.rel_tolerance && evaluations < o.max_evaluations) {
    const double mid = std::sqrt(lo * hi);
    absl::StatusOr<bool> pass = run(mid);
    if (!pass.ok()) return pass.status();
    (*pass ? lo : hi) = mid;
  }
  std::sort(result.curve.begin(), result.curve.end(),
            [](const GoodputPoint& a, const GoodputPoint& b) { return a.speedup < b.speedup; });
  return result;
}

std::string FormatGoodputCurve(const GoodputSearchResult& result, double target) {
  std::string out = absl::StrFormat("%10s %14s %12s %14s\n", "speedup", "offered req/s",
                                    "attainment", "goodput req/s");
  for (const GoodputPoint& p : result.curve) {
    absl::StrAppendFormat(&out, "%10.4g %14.4f %11.1f%% %14.4f%s\n", p.speedup, p.offered_rps,
                          p.attainment * 100, p.goodput_rps,
                          p.attainment >= target ? "" : "  (below target)");
  }
  if (result.best) {
    absl::StrAppendFormat(&out,
                          "highest rate with >= %.0f%% attainment: speedup %.4g, %.4f req/s "
                          "offered, goodput %.4f req/s\n",
                          target * 100, result.best->speedup, result.best->offered_rps,
                          result.best->goodput_rps);
  } else {
    absl::StrAppendFormat(&out, "no evaluated rate reached %.0f%% attainment\n", target * 100);
  }
  return out;
}

std::string GoodputPlotSvg(const GoodputSearchResult& result, double target) {
  PlotSpec spec;
  spec.title = "SLO attainment vs offered request rate";
  spec.x_label = "offered rate (requests/s)";
  spec.y_label = "SLO attainment";
  spec.y_is_fraction = true;
  PlotSeries s{"attainment", {}, false, true};
  for (const GoodputPoint& p : result.curve) s.points.emplace_back(p.offered_rps, p.attainment);
  spec.series.push_back(std::move(s));
  spec.references.push_back({false, target, absl::StrFormat("%.0f%% target", target * 100)});
  if (result.best) {
    spec.references.push_back(
        {true, result.best->offered_rps, absl::StrFormat("%.3g req/s", result.best->offered_rps)});
  }
  return RenderLinePlot(spec);
}

}  // namespace strata::replay
