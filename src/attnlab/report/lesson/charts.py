"""Small line charts with their axes, drawn as SVG inside the page: a learner's time and memory against T.

A curve without axes says only that something rose. Each chart here has both axes with ticks and
numbers in the quantity's own unit (``128``, ``2048``; ``1 ms``, ``100 ms``; ``256 KiB``), a name on
each axis, and a dot with its value (shown on hover) at every measured point, so the reader can read
the numbers off it. Growth is read on logarithmic axes: a straight line of slope p there is T^p.
Nothing here is measured; the charts draw what a check kept.
"""

from __future__ import annotations

import math
from html import escape

W, H = 330, 214  # the chart's box in CSS pixels at desktop width (it shrinks with a narrower column)
LEFT, RIGHT, TOP, BOTTOM = 74, 14, 26, 40  # the plot's margins: tick labels left and below, axis names
MOST_TICKS = 5


def _nice_log(lo: float, hi: float, unit: int = 1000) -> list[float]:
    """Round values within [lo, hi] on a logarithmic axis, at most MOST_TICKS: 1, 2 and 5 times a power of ten of
    each power of ``unit`` (1024 for bytes: 256 KiB is not round, 200 KiB is), the powers of ten kept first."""
    found = set()
    for j in range(-4, 5):  # the unit's powers (µ to T; KiB to TiB)
        for k in range(3):
            found |= {m * 10 ** k * float(unit) ** j for m in (1, 2, 5) if m * 10 ** k < unit or unit == 1000}
    ticks = sorted(t for t in found if lo <= t <= hi)
    while len(ticks) > MOST_TICKS:  # keep the powers of ten, then every other one
        tens = [t for t in ticks if math.isclose(10 ** round(math.log10(t / unit ** math.floor(math.log(t, unit)))),
                                                 t / unit ** math.floor(math.log(t, unit)))]
        ticks = tens if len(tens) < len(ticks) and len(tens) >= 3 else ticks[::2]
    return ticks


def _nice_linear(lo: float, hi: float) -> list[float]:
    """Round values at an even step (1, 2 or 5 times a power of ten) within [lo, hi], at most MOST_TICKS + 1."""
    span = (hi - lo) or abs(hi) or 1.0
    raw = span / (MOST_TICKS - 1)
    step = min((m * 10.0 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class Axis:
    """One axis: its range (padded so no point sits on the edge), its scale and ticks, and where a value is drawn."""

    def __init__(self, values, log: bool, ticks=None, fmt=str, unit: int = 1000):
        lo, hi = min(values), max(values)
        if log:
            pad = (math.log10(hi) - math.log10(lo)) * 0.08 or 0.3
            lo, hi = 10 ** (math.log10(lo) - pad), 10 ** (math.log10(hi) + pad)
        else:
            pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
            lo, hi = lo - pad, hi + pad
        self.lo, self.hi, self.log, self.fmt = lo, hi, log, fmt
        found = ticks if ticks is not None else _nice_log(lo, hi, unit) if log else _nice_linear(lo, hi)
        if len(found) < 2:  # a narrow range: its own ends, labelled
            found = sorted({min(values), max(values)})
        self.ticks = found

    def at(self, x: float) -> float:
        """Where ``x`` falls, from 0 (the low end) to 1."""
        f = math.log10 if self.log else float
        return (f(x) - f(self.lo)) / ((f(self.hi) - f(self.lo)) or 1)


def chart(series: list[tuple[str, str, list[tuple[float, float]]]], x: Axis, y: Axis, xname: str, yname: str,
          label: str) -> str:
    """An SVG chart of ``series`` -- (name, CSS class, points) -- on axes ``x`` and ``y``, each named.

    The first series is drawn last, on top, with a dot (and its value on hover) at each point."""
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    px = lambda v: LEFT + x.at(v) * pw  # noqa: E731
    py = lambda v: TOP + (1 - y.at(v)) * ph  # noqa: E731
    parts = [f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/>']
    for t in x.ticks:
        parts.append(f'<line class="grid" x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{TOP}" y2="{TOP + ph}"/>'
                     f'<text class="tick" x="{px(t):.1f}" y="{TOP + ph + 15}" text-anchor="middle">'
                     f"{escape(x.fmt(t))}</text>")
    for t in y.ticks:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}"/>'
                     f'<text class="tick" x="{LEFT - 5}" y="{py(t) + 4:.1f}" text-anchor="end">'
                     f"{escape(y.fmt(t))}</text>")
    parts.append(f'<text class="axis-name" x="{LEFT + pw / 2:.1f}" y="{H - 6}" text-anchor="middle">'
                 f"{escape(xname)}</text>")
    parts.append(f'<text class="axis-name" x="4" y="{TOP - 10}">{escape(yname)}</text>')  # above, not turned
    for i, (name, cls, pts) in reversed(list(enumerate(series))):
        pts = [(a, b) for a, b in pts if b > 0 or not y.log]
        if not pts:
            continue
        parts.append(f'<polyline class="{cls}" fill="none" points="'
                     + " ".join(f"{px(a):.1f},{py(b):.1f}" for a, b in pts) + '"/>')
        if i == 0:
            parts += [f'<circle class="{cls}" cx="{px(a):.1f}" cy="{py(b):.1f}" r="3.5"><title>{escape(name)}: '
                      f"{escape(x.fmt(a))}, {escape(y.fmt(b))}</title></circle>" for a, b in pts]
    return (f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{escape(label)}">{"".join(parts)}</svg>')


def figure(svg: str, caption: str) -> str:
    """A chart with its caption (HTML: the legend and the numbers it is drawn through)."""
    return f'<figure class="level-curve">{svg}<figcaption>{caption}</figcaption></figure>'


def legend(series) -> str:
    return " · ".join(f'<span class="{cls}">{escape(name)}</span>' for name, cls, _ in series)
