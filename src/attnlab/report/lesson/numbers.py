"""The handful of numbers the page's prose quotes, pulled out of the results (None where not measured)."""

from __future__ import annotations

import math

from attnlab.report.fmt import fmt_time  # noqa: F401 -- the page writes times as the tables do


def demo_peaks(demo, d: int = 256) -> dict | None:
    """scale -> the demo's mean peak weight at head width ``d`` (a DemoResult), with the uniform weight."""
    if d not in demo.widths:
        return None
    i = demo.widths.index(d)
    return {name: vals[i] for name, vals in demo.peak.items()} | {"uniform": 1 / demo.scale_T, "d": d}


def bench_times(bench, key: str = "time_s") -> dict[str, dict[int, float]]:
    """impl -> {seq: seconds} (``time_s`` the median, ``time_min_s`` the fastest), measured cases only."""
    out: dict[str, dict[int, float]] = {}
    for r in bench.results if bench else []:
        if getattr(r, key) and not r.skipped:
            out.setdefault(r.impl, {})[r.seq] = getattr(r, key)
    return out


def ratio(bench, impl: str, ref: str = "sdpa") -> tuple[float, int] | None:
    """Fastest time(impl) / fastest time(ref) at the longest length where both were measured, and that length.

    The fastest of the repeats, not the median: on a busy machine the median carries other programs' work.
    """
    t = bench_times(bench, "time_min_s")
    common = sorted(set(t.get(impl, {})) & set(t.get(ref, {})))
    if not common:
        return None
    T = common[-1]
    return t[impl][T] / t[ref][T], T


def final_val(train) -> dict[str, float]:
    """variant -> the last validation loss (a TrainResult); NaN where the run diverged."""
    return {n: v.val_loss[-1] for n, v in (train.variants if train else {}).items() if v.val_loss}


def entropy_ends(train) -> dict[str, tuple[float, float]]:
    """variant -> (mean entropy over layers at the first log, at the last)."""
    out = {}
    for n, v in (train.variants if train else {}).items():
        e = [x for x in v.entropy if x and not any(map(math.isnan, x))]  # NaN: a log after the run diverged
        if e:
            out[n] = (sum(e[0]) / len(e[0]), sum(e[-1]) / len(e[-1]))
    return out



