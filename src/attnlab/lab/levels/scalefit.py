"""A scale measured beside a mask slip: the number the learner's scores are multiplied by, read from their outputs.

Where the output is no slip's and no two slips' at once, it may still be one mask slip's with a scale that is no
slip of the list: ``E ** -1/2`` is (1/E)/2 in Python. For each of the lists' masks, the scale that brings that mask's
attention nearest the learner's output is found on each probe by itself (a search over its logarithm); where the
scales so found follow one law of the head width -- a constant, c/√d or c/d -- and attention with that mask and
that law *is* the learner's output on every probe by the reading rule, the mask slip is named and the scale is
said as measured, with its law. Nothing is said where no mask and law meet the outputs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnlab.judge import readings
from attnlab.judge.probes.fitted import search

from . import ways

LOGS = torch.linspace(math.log(1e-3), math.log(1e2), 111).tolist()  # ln of the scales tried, times the spec's 1/√d
LAWS = ((0.0, "{c:.4g}"), (0.5, "{c:.4g}/√d"), (1.0, "{c:.4g}/d"))  # d ** -power times c, as said


def found(live, mine, right, dtypes) -> tuple[str, str, object] | None:
    """(the mask slip's key, the measured scale's words, the slip ``(q, k, v, causal) -> out``) where one mask of
    :data:`ways.COMMON` with a scale of one law is the learner's output on every probe; None where none is. ``live``:
    (case, q, k, v, mine) per probe that answered."""
    calm = [i for i, (c, *_rest) in enumerate(live) if not c.magnitude > 1]
    for key, way in ways.COMMON:
        if way.mask in ("right", "always") or replace(way, mask="right", fill=ways.Way().fill) != ways.Way():
            continue
        law = _law([(live[i][0].E, _fitted(live[i], way)) for i in calm])
        if law is None:
            continue
        power, c, words = law
        slip = _slip(way, c, power)
        got = [slip(q, k, v, case.is_causal) for case, q, k, v, _ in live]
        if readings.fits([None if g is None else {"out": g} for g in got], mine, right, dtypes, by_value=True):
            return key, words, slip
    return None


def _slip(way, c: float, power: float):
    def slip(q, k, v, causal):
        return ways.attention(q, k, v, causal, replace(way, scale="fit", factor=c * q.shape[-1] ** -power))
    return slip


def _fitted(probe, way) -> float:
    """The scale that brings attention under ``way``'s mask nearest the learner's output on one probe."""
    case, q, k, v, mine = probe
    got = mine["out"]

    def gap(log_c: float) -> float:
        out = ways.attention(q, k, v, case.is_causal, replace(way, scale="fit", factor=math.exp(log_c) / math.sqrt(
            q.shape[-1])))
        if out is None or not torch.equal(torch.isfinite(out), torch.isfinite(got)):
            return math.inf
        both = torch.isfinite(out)
        return float((out - got)[both].abs().max()) if both.any() else math.inf

    best = search(gap, LOGS)  # (None: at the grid's end, no scale inside it meets the output)
    return math.nan if best is None else math.exp(best) / math.sqrt(q.shape[-1])


def _law(scales: list[tuple[int, float]]) -> tuple[float, float, str] | None:
    """(power, c, words): the law c * d ** -power the scales fitted at each head width d follow (within 1 %), the
    spec's own (c = 1, power 1/2) excepted; None where none does, or where the widths are one."""
    if len({d for d, _ in scales}) < 2:
        return None
    for power, words in LAWS:
        cs = [s * d ** power for d, s in scales]
        if all(map(math.isfinite, cs)) and max(cs) <= min(cs) * 1.01 and min(cs) > 0:
            c = sum(cs) / len(cs)
            if power == 0.5 and abs(c - 1) < 0.01:
                return None
            return power, c, words.format(c=c)
    return None
