#include "strata/replay/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace strata::replay {
namespace {

constexpr double kWidth = 720, kHeight = 440;
constexpr double kLeft = 80, kRight = 170, kTop = 40, kBottom = 60;  // Margins.
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b"};

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string TickLabel(double v, bool percent) {
  if (percent) return absl::StrFormat("%g%%", std::round(v * 1000) / 10);
  return absl::StrFormat("%g", std::abs(v) < 1e-12 ? 0.0 : v);
}

struct Frame {
  double x0, x1, y0, y1;
  double X(double x) const { return kLeft + (x - x0) / (x1 - x0) * (kWidth - kLeft - kRight); }
  double Y(double y) const {
    return kHeight - kBottom - (y - y0) / (y1 - y0) * (kHeight - kTop - kBottom);
  }
};

std::pair<double, double> Range(const PlotSpec& spec, bool x_axis) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : spec.series) {
    for (const auto& [x, y] : s.points) {
      const double v = x_axis ? x : y;
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  for (const auto& r : spec.references) {
    if (r.vertical != x_axis || !std::isfinite(r.value)) continue;
    lo = std::min(lo, r.value);
    hi = std::max(hi, r.value);
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if ((x_axis && spec.x_from_zero) || (!x_axis && lo > 0)) lo = std::min(lo, 0.0);
  if (hi <= lo) hi = lo + 1;
  return {lo, hi};
}

void Axes(std::string& svg, const Frame& f, const std::vector<double>& xt,
          const std::vector<double>& yt, bool percent) {
  for (double x : xt) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          f.X(x), kTop, f.X(x), kHeight - kBottom, f.X(x), kHeight - kBottom + 18,
                          TickLabel(x, false));
  }
  for (double y : yt) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, f.Y(y), kWidth - kRight, f.Y(y), kLeft - 6, f.Y(y) + 4,
                          TickLabel(y, percent));
  }
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"#333\"/>\n",
                        kLeft, kTop, kWidth - kLeft - kRight, kHeight - kTop - kBottom);
}

void Series(std::string& svg, const Frame& f, const PlotSeries& s, const char* color) {
  std::string path;
  double prev_y = 0;
  bool first = true;
  for (const auto& [x, y] : s.points) {
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    if (first) {
      absl::StrAppendFormat(&path, "M%.1f,%.1f", f.X(x), f.Y(y));
    } else {
      if (s.step) absl::StrAppendFormat(&path, " L%.1f,%.1f", f.X(x), f.Y(prev_y));
      absl::StrAppendFormat(&path, " L%.1f,%.1f", f.X(x), f.Y(y));
    }
    first = false;
    prev_y = y;
  }
  if (!path.empty()) {
    absl::StrAppendFormat(&svg,
                          "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", path,
                          color);
  }
  if (!s.markers) return;
  for (const auto& [x, y] : s.points) {
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                          f.X(x), f.Y(y), color);
  }
}

void References(std::string& svg, const Frame& f, const std::vector<ReferenceLine>& refs) {
  for (const auto& r : refs) {
    const double x1 = r.vertical ? f.X(r.value) : kLeft;
    const double x2 = r.vertical ? f.X(r.value) : kWidth - kRight;
    const double y1 = r.vertical ? kTop : f.Y(r.value);
    const double y2 = r.vertical ? kHeight - kBottom : f.Y(r.value);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                          "stroke-dasharray=\"6,4\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\" "
                          "text-anchor=\"end\">%s</text>\n",
                          x1, y1, x2, y2, r.vertical ? x1 - 4 : x2 - 4,
                          r.vertical ? kHeight - kBottom - 8 : y1 - 5, Escape(r.label));
  }
}

void Legend(std::string& svg, const PlotSpec& spec) {
  const double x = kWidth - kRight + 14;
  for (size_t i = 0; i < spec.series.size(); ++i) {
    const double y = kTop + 10 + 22 * static_cast<double>(i);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          x, y, x + 22, y, kColors[i % std::size(kColors)], x + 28, y + 4,
                          Escape(spec.series[i].name));
  }
}

}  // namespace

std::vector<double> NiceTicks(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag * 10;
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (mag * m >= raw) {
      step = mag * m;
      break;
    }
  }
  std::vector<double> ticks;
  const double first = std::floor(lo / step + 1e-9) * step;
  for (double t = first; ticks.empty() || ticks.back() < hi - step * 1e-9; t += step) {
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    if (ticks.size() > 100) break;
  }
  return ticks;
}

std::string RenderLinePlot(const PlotSpec& spec) {
  auto [xlo, xhi] = Range(spec, true);
  auto [ylo, yhi] = spec.y_is_fraction ? std::pair{0.0, 1.0} : Range(spec, false);
  const std::vector<double> xt = NiceTicks(xlo, xhi, 8);
  const std::vector<double> yt = NiceTicks(ylo, yhi, 5);
  const Frame f{xt.front(), xt.back(), yt.front(), yt.back()};
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n<text x=\"%.1f\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">%s"
      "</text>\n",
      kWidth, kHeight, (kLeft + kWidth - kRight) / 2, Escape(spec.title));
  Axes(svg, f, xt, yt, spec.y_is_fraction);
  References(svg, f, spec.references);
  for (size_t i = 0; i < spec.series.size(); ++i) {
    Series(svg, f, spec.series[i], kColors[i % std::size(kColors)]);
  }
  Legend(svg, spec);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n"
                        "<text transform=\"translate(18,%.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">%s</text>\n</svg>\n",
                        (kLeft + kWidth - kRight) / 2, kHeight - 16, Escape(spec.x_label),
                        (kTop + kHeight - kBottom) / 2, Escape(spec.y_label));
  return svg;
}

}  // namespace strata::replay
