"""What a probe measured, as a rule the other cases are held to: a measured difference that explains their rows too.

A probe measures a difference on designed inputs -- the last key each query sees is one later than the spec's;
the scores are 0.42 times the spec's. Where such a difference is a rule (the same shift in every row, one factor
on every score), it is also a question the judge can ask of every other case: what would attention that differs
from the spec in just that way have answered there? Held to the failing rows of the random grid like any
alternative (:mod:`attnlab.judge.explain`), it says whether the measured difference is what went wrong there too:
the rows it explains join the probe's line, and the rows it does not are left to the other causes.
"""

from __future__ import annotations

import math
import re

import torch

from attnlab.judge.explain import Alternative

KEY = "measured:{kind}@{pattern}"  # the hint of a row a probe's rule explains: the probe line's kind and pattern


def key(m: dict) -> str:
    """The hint that names a probe's measured difference (its pattern in letters, digits and _ only: a hint's other
    characters mark ties, pairs and support)."""
    return KEY.format(kind=m["kind"], pattern=pattern(m))


def pattern(m: dict) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", m.get("pattern") or m["kind"]).strip("_")


def alternatives(rules: list[dict]) -> list[Alternative]:
    """The alternatives of the rules measured so far (each a Measured's dict with a ``rule``)."""
    out = []
    for m in rules:
        rule = m.get("rule") or {}
        if "edges" in rule:
            first, last = rule["edges"]
            out.append(Alternative(key(m), lambda kw, a=first, b=last: _shifted(kw, a, b)))
        if "score-factor" in rule:
            out.append(Alternative(key(m), lambda kw, f=rule["score-factor"]: _scaled(kw, f)))
    return out


def _shifted(kw: dict, first: int, last: int) -> dict:
    """Each row's run of seen keys with its first key moved by ``first`` and its last by ``last`` (clipped to the
    keys there are); a row whose seen keys are not one run, or that sees none, as it was."""
    from attnlab.judge.hypotheses import _seen

    seen = _seen(kw)
    if seen is None:
        raise ValueError("every key seen: no edge to move")
    S = seen.shape[-1]
    j = torch.arange(S)
    lo = torch.where(seen, j, S).amin(-1, keepdim=True)
    hi = torch.where(seen, j, -1).amax(-1, keepdim=True)
    run = seen.sum(-1, keepdim=True) == (hi - lo + 1)
    moved = (j >= lo + first) & (j <= hi + last) & (hi >= 0)
    new = torch.where(run, moved, seen)
    m = kw["attn_mask"]
    if m is not None and m.dtype != torch.bool:  # a float mask's values where they were, 0 on keys now seen
        bias = torch.where(torch.isneginf(m), 0.0, m).expand(new.shape) if m.shape != new.shape else \
            torch.where(torch.isneginf(m), 0.0, m)
        return {**kw, "attn_mask": torch.where(new, bias, -math.inf), "is_causal": False}
    return {**kw, "attn_mask": new, "is_causal": False}


def _scaled(kw: dict, factor: float) -> dict:
    E = kw["query"].shape[-1]
    scale = 1.0 / math.sqrt(E) if kw["scale"] is None else float(kw["scale"])
    return {**kw, "scale": scale * factor}
