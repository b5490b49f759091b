"""Divide by d instead of sqrt(d), and the softmax goes flat.

For unit-variance queries and keys, a dot product over d features has variance d, so its spread
is sqrt(d). Dividing by sqrt(d) brings the spread back to 1 for every width: the softmax stays as
sharp at d = 1024 as at d = 4. Dividing by d over-corrects -- the spread becomes 1/sqrt(d) -- and
as heads get wider every score shrinks toward 0, every weight toward 1/T, and the entropy toward its
maximum log T: the head averages everything and can no longer pick. No scale at all is the
opposite failure: the spread grows like sqrt(d) and the softmax saturates on one key.
We measure the mean peak weight and the mean entropy of softmax rows, for the three scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnlab.demo import SCALE_LABELS, row_stats
from attnlab.nn.attention import SCALES, resolve_scale
from attnlab.results import Result, machine, versions

LABELS = SCALE_LABELS


@dataclass
class InvScaleResult(Result):
    seed: int
    T: int  # keys per softmax row
    trials: int
    widths: list[int]
    peak: dict[str, list[float]]  # scale -> mean peak weight per width
    entropy: dict[str, list[float]]  # scale -> mean row entropy (nats) per width
    max_entropy: float  # log T: the uniform distribution
    machine: dict
    versions: dict

    def at(self, d: int) -> dict[str, tuple[float, float]]:
        i = self.widths.index(d)
        return {s: (self.peak[s][i], self.entropy[s][i]) for s in self.peak}


def run(seed: int = 0, T: int = 64, trials: int = 16) -> InvScaleResult:
    widths = [2**p for p in range(2, 11)]  # 4 .. 1024
    peak: dict[str, list[float]] = {s: [] for s in SCALES}
    entropy: dict[str, list[float]] = {s: [] for s in SCALES}
    for d in widths:
        for name in SCALES:
            # the same q, k for the three scales at each width
            p, e = row_stats(d, resolve_scale(name, d), T, trials, seed + d)
            peak[name].append(p)
            entropy[name].append(e)
    return InvScaleResult(seed, T, trials, widths, peak, entropy, math.log(T), machine(), versions())


def finding(r: InvScaleResult) -> str:
    lo, hi = r.widths[0], r.widths[-1]
    a, b = r.at(lo), r.at(hi)
    return (f"From d={lo} to d={hi} ({r.T} keys, uniform entropy {r.max_entropy:.2f}): with 1/d the entropy rises "
            f"{a['inv'][1]:.2f} -> {b['inv'][1]:.2f} and the peak weight falls {a['inv'][0]:.3f} -> {b['inv'][0]:.3f} "
            f"(near uniform {1 / r.T:.3f}: under-sharpened); with 1/sqrt(d) they stay put ({a['sqrt'][1]:.2f} -> "
            f"{b['sqrt'][1]:.2f}, peak {a['sqrt'][0]:.2f} -> {b['sqrt'][0]:.2f}); unscaled the entropy collapses "
            f"{a['none'][1]:.2f} -> {b['none'][1]:.2f}.")


RESULT = InvScaleResult
