#pragma once
// A minimal line-chart renderer that writes self-contained SVG text (no plotting library):
// title, axes with "nice" tick values and grid lines, axis labels, a legend, optional dashed
// reference lines (an SLO, a 90% target). Deterministic output for equal input.
#include <string>
#include <utility>
#include <vector>

namespace strata::replay {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order.
  bool step = false;     // Draw as a step function (CDFs).
  bool markers = false;  // Draw a dot at each point.
};

struct ReferenceLine {
  bool vertical = false;  // x = value when true, else y = value.
  double value = 0;
  std::string label;
};

struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  std::vector<ReferenceLine> references;
  bool y_is_fraction = false;  // Fixes the y range to [0, 1] and labels ticks as percent.
  bool x_from_zero = true;     // Starts the x axis at 0 (else at the smallest x).
};

// Up to about `target` round tick values (1, 2, 2.5 or 5 times a power of ten) covering
// [lo, hi]; the first <= lo and the last >= hi. lo < hi required (callers widen equal ranges).
std::vector<double> NiceTicks(double lo, double hi, int target);

// The chart as an SVG document (width 720, height 440).
std::string RenderLinePlot(const PlotSpec& spec);

}  // namespace strata::replay
