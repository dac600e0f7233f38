"""A small self-contained SVG line chart (no plotting library needed), for the scripts' plots
of measurements over time.

    svg = line_chart("RSS", "seconds", "MiB", {"router-1": [(0, 30.5), (10, 31.0)], ...},
                     markers=[(120.0, "kill router-0")])
    open("rss.svg", "w").write(svg)

Each series is drawn as a polyline in its own colour with a legend entry; markers are dashed
vertical lines (e.g. the moments processes were killed). Gaps in a series (None values) break
its line.
"""
import html
import math

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]


def _nice_ticks(lo, hi, count=5):
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    t = first
    while t < hi + step * (1 - 1e-9):  # the last tick is at or above hi
        ticks.append(round(t, 10))
        t += step
    return ticks


def _fmt(v):
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def line_chart(title, x_label, y_label, series, markers=(), width=960, height=420,
               y_from_zero=True):
    """The SVG text of one chart; `series` maps a name to [(x, y or None), ...]."""
    left, right, top, bottom = 70, 190, 40, 50
    pw, ph = width - left - right, height - top - bottom
    points = [(x, y) for pts in series.values() for x, y in pts if y is not None]
    xs = [x for x, _ in points] + [x for x, _ in markers]
    ys = [y for _, y in points]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0, 1)
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0, 1)
    if y_from_zero:
        y_lo = min(0, y_lo)
    x_ticks, y_ticks = _nice_ticks(x_lo, x_hi), _nice_ticks(y_lo, y_hi)
    x_lo, x_hi = min(x_lo, x_ticks[0]), max(x_hi, x_ticks[-1])
    y_lo, y_hi = min(y_lo, y_ticks[0]), max(y_hi, y_ticks[-1])

    def px(x):
        return left + (x - x_lo) / ((x_hi - x_lo) or 1) * pw

    def py(y):
        return top + ph - (y - y_lo) / ((y_hi - y_lo) or 1) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="15">{html.escape(title)}</text>']
    for t in y_ticks:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                   'stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    for t in x_ticks:
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 18}" text-anchor="middle">'
                   f'{_fmt(t)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
               'stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">'
               f'{html.escape(x_label)}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">{html.escape(y_label)}</text>')
    for x, label in markers:
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{top}" y2="{top + ph}" '
                   f'stroke="#999" stroke-dasharray="3,3"><title>{html.escape(label)}</title>'
                   '</line>')
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        runs, run = [], []
        for x, y in pts:
            if y is None:
                if run:
                    runs.append(run)
                run = []
            else:
                run.append(f"{px(x):.1f},{py(y):.1f}")
        if run:
            runs.append(run)
        for r in runs:
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
                       f'points="{" ".join(r)}"/>')
        ly = top + 14 + 16 * i
        out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly - 4}" '
                   f'y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{left + pw + 38}" y="{ly}">{html.escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
