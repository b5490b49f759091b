"""How a cost grows with the sequence length: a straight line on a log-log plot.

If a cost grows like ``c · T^p``, then ``log cost = log c + p · log T``: a straight line whose
slope is the exponent ``p``. Fitting that line by least squares to measurements at a few lengths
gives ``p`` as one number -- near 2 for the matrix form's memory (it holds an L x S matrix), near 1
for a tiled form that keeps only a few tiles at a time, near 2 for the time of every exact form
(every query meets every key).

A measurement repeated gives a spread at each length, and so a spread of slopes: :func:`fit` says the
slope through the medians and the least and greatest slope the repeats allow. A claim about growth
("quadratic", "T^1.9") holds for the noise measured only when it holds over that whole range.

The same line, with its slope clipped to a plausible range, estimates the cost of a length not yet
measured: that is how the benchmark decides, before running a case, whether it fits in memory and
in its time budget.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from attnlab.results import Result


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


def dominant(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points where the part of a cost that grows with T dominates: the longer half of the lengths.

    A measured cost is ``fixed + c · T^p``: a call's own overhead, or memory the allocator keeps, is
    the same at every length and flattens the slope at the short ones (the matrix form's memory read
    T^1.7 over T = 128..2048 and T^2.00 over 1024..4096). Fitting over the longer half of the lengths
    -- at least two, all of them when there are two -- reads ``p`` where ``c · T^p`` is the larger part.
    It lessens the bias of a fixed part, it cannot remove it: measure without one where that is possible
    (the benchmark gives every block its own mapping, so the heap keeps nothing in the peaks).
    Points that are not positive and finite are left out first.
    """
    pts = sorted((x, y) for x, y in points if _positive(x) and _positive(y))
    return pts[-max(2, (len(pts) + 1) // 2):]


@dataclass
class Fit(Result):
    """A growth exponent fitted on repeated measurements, with the range the repeats allow."""

    exponent: float  # the slope through the median at each length
    low: float  # the least slope any choice of one repeat per length gives
    high: float  # the greatest
    lengths: tuple[int, ...]  # the lengths fitted (the longer half, see dominant)
    repeats: int  # the fewest measurements at one of those lengths (1: no spread there to see)

    @property
    def spread(self) -> float:
        return self.high - self.low

    def within(self, target: float, margin: float) -> bool | None:
        """True when the whole range lies within ``margin`` of ``target``, False when all of it lies outside, None
        when the repeats straddle the line (they do not decide)."""
        if self.low >= target - margin and self.high <= target + margin:
            return True
        if self.high < target - margin or self.low > target + margin:
            return False
        return None


def fit(samples: Mapping[int, Sequence[float]]) -> Fit | None:
    """The growth exponent of repeated measurements ``{length: [value, ...]}`` over the longer half of the lengths.

    The least-squares slope is linear in each log(value), with a coefficient of the sign of
    ``log(length) - mean``: so the least slope takes the largest value below the mean length and the
    smallest above it, the greatest the other way round. None with fewer than two lengths measured.
    """
    ys = {x: [y for y in v if _positive(y)] for x, v in samples.items() if _positive(x)}
    med = {x: statistics.median(v) for x, v in ys.items() if v}
    xs = [x for x, _ in dominant(list(med.items()))]
    if len(xs) < 2:
        return None
    mean = sum(math.log(x) for x in xs) / len(xs)
    lo = [max(ys[x]) if math.log(x) < mean else min(ys[x]) for x in xs]
    hi = [min(ys[x]) if math.log(x) < mean else max(ys[x]) for x in xs]
    return Fit(exponent(xs, [med[x] for x in xs]), exponent(xs, lo), exponent(xs, hi), tuple(xs),
               min(len(ys[x]) for x in xs))


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
