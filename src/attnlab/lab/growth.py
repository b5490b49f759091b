"""How a cost grows with the sequence length: a straight line on a log-log plot.

If a cost grows like ``c · T^p``, then ``log cost = log c + p · log T``: a straight line whose
slope is the exponent ``p``. Fitting that line by least squares to measurements at a few lengths
gives ``p`` as one number -- near 2 for the matrix form's memory (it holds an L x S matrix), near 1
for a tiled form that keeps only a few tiles at a time, near 2 for the time of every exact form
(every query meets every key).

The same line, with its slope clipped to a plausible range, estimates the cost of a length not yet
measured: that is how the benchmark decides, before running a case, whether it fits in memory and
in its time budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def exponent(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of log(y) against log(x); None with fewer than two distinct positive x.

    Points where x or y is not a positive finite number are left out (a skipped case, a peak too
    small to measure).
    """
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True)
           if _positive(x) and _positive(y)]
    if len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return sxy / sxx


def extrapolate(points: Sequence[tuple[float, float]], x: float, *, lo: float = 1.0, hi: float = 2.0,
                default: float = 2.0) -> float | None:
    """Estimate y at ``x`` from measured (x, y) points: from the largest x, along the fitted slope.

    The slope is clipped to [lo, hi]; with a single point it is ``default``. None without points.
    """
    pts = [(px, py) for px, py in points if _positive(px) and _positive(py)]
    if not pts:
        return None
    p = exponent([a for a, _ in pts], [b for _, b in pts])
    p = default if p is None else min(hi, max(lo, p))
    x0, y0 = max(pts)
    return y0 * (x / x0) ** p


def _positive(v) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(v) and v > 0
