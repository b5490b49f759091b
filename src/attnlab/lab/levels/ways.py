"""Attention with each step switchable: what attention with one slip -- or two -- returns (every attention level).

A :class:`Way` says how each step is taken: the scale, the mask, the softmax, the scores, the values;
:func:`attention` computes it on a probe's inputs, in their dtype. :data:`COMMON` is the slips
learners make in attention itself, each a key and a Way with one step wrong; :func:`pairs` the
same two at a time (two steps wrong at once: a scale left out *and* the mask after the softmax), for
an output that no single slip explains. A step that cannot be taken on a probe's shapes (``k.T``
where the sizes differ: the learner's code raised there) gives None: that probe says nothing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, fields, replace

import torch


@dataclass(frozen=True)
class Way:
    scale: str = "right"  # "none"; "1/d"; "sqrt": times √d; "S", "L": 1/sqrt of a length; "after": the weights
    # divided by √d after an unscaled softmax; "after-twice": after a scaled one too
    mask: str = "right"  # "none"; "ahead" (j <= i + 1); "diagonal" (j < i); "reversed" (j >= i); "reversed-strict"
    # (j > i); "lower-right"; "zero", "finite" (hidden scores set to 0, or to ``fill``); "after" (the weights zeroed
    # after the softmax); "always" (masked when is_causal is False)
    fill: float = -math.inf
    softmax: str = "right"  # "dim" (over the queries); "max-axis" (the columns' max); "unnormalised";
    # "unnormalised-raw" (no max either); "max-before-mask" (the row's max over the hidden scores too)
    scores: str = "right"  # "transposed" (k @ qᵀ); "k.T" (every axis of a batched k reversed)
    values: str = "right"  # "v": each query's own value row
    factor: float = 0.0  # with scale "fit": the scores' multiplier, measured (:mod:`.scalefit`)


FILLS = (-10.0, -30.0, -50.0, -100.0, -500.0)  # the finite "minus infinity"s learners write (that a probe can tell)
COMMON = [
    ("unscaled", Way(scale="none")), ("scale-1/d", Way(scale="1/d")), ("scale-inverted", Way(scale="sqrt")),
    ("scale-length", Way(scale="S")),
    ("scale-length", Way(scale="L")), ("softmax-dim", Way(softmax="dim")), ("max-axis", Way(softmax="max-axis")),
    ("unnormalised", Way(softmax="unnormalised")), ("unnormalised", Way(softmax="unnormalised-raw")),
    ("peeks-ahead", Way(mask="ahead")), ("causal-reversed", Way(mask="reversed")),
    ("causal-reversed", Way(mask="reversed-strict")), ("diagonal", Way(mask="diagonal")),
    ("lower-right", Way(mask="lower-right")), ("mask-zero", Way(mask="zero", fill=0.0)),
    *[("mask-finite", Way(mask="finite", fill=f)) for f in FILLS],
    ("max-before-mask", Way(softmax="max-before-mask")), ("scale-after-softmax", Way(scale="after")),
    ("scale-after-softmax", Way(scale="after-twice")), ("mask-after-softmax", Way(mask="after")),
    ("causal-ignored", Way(mask="none")), ("causal-always", Way(mask="always")),
    ("scores-transposed", Way(scores="transposed")), ("k-T", Way(scores="k.T")), ("out-is-v", Way(values="v")),
]
CAUSAL_ONLY = {"ahead", "diagonal", "reversed", "reversed-strict", "lower-right", "zero", "finite", "after", "none"}


def attention(q, k, v, causal: bool, way: Way = Way()):
    """(..., L, Ev) attention of q, k, v taken ``way`` (causal: top-left, as PyTorch's is_causal); None where that
    way says nothing of this probe (a mask slip without a mask, ``k.T`` where the sizes differ)."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if (way.mask in CAUSAL_ONLY and not causal) or (way.mask == "always" and causal):
        return None
    if (way.scores == "k.T" and (q.dim() != 4 or len(set(q.shape) | set(k.shape)) != 1)) or (
            way.scores == "transposed" and L != S) or (way.values == "v" and L > S):
        return None
    sc = {"right": 1 / math.sqrt(E), "none": 1.0, "1/d": 1 / E, "S": 1 / math.sqrt(S), "L": 1 / math.sqrt(L),
          "after": 1.0, "after-twice": 1 / math.sqrt(E), "sqrt": math.sqrt(E), "fit": way.factor}[way.scale]
    keys = k.permute(3, 2, 1, 0).transpose(-2, -1) if way.scores == "k.T" else k
    s = q @ keys.transpose(-2, -1) * sc
    if way.scores == "transposed":
        s = s.transpose(-2, -1)
    hidden = ~_visible(L, S, causal, way.mask)
    w = _weights(s, hidden, way)
    out = w @ v
    if way.scale.startswith("after"):
        out = out / math.sqrt(E)
    return v[..., :L, :].clone() if way.values == "v" else out


def _visible(L: int, S: int, causal: bool, mask: str) -> torch.Tensor:
    ones = torch.ones(L, S, dtype=torch.bool)
    if not causal and mask != "always":
        return ones
    shift = {"ahead": 1, "diagonal": -1, "lower-right": S - L}.get(mask, 0)
    if mask == "none":
        return ones
    if mask in ("reversed", "reversed-strict"):
        return ~ones.tril(-1 if mask == "reversed" else 0)
    return ones.tril(shift)


def _weights(s, hidden, way: Way):
    raw = s  # before the mask
    if way.mask in ("zero", "finite"):
        s = s.masked_fill(hidden, way.fill)
    elif way.mask != "after":
        s = s.masked_fill(hidden, -math.inf)
    if way.softmax == "dim":
        w = torch.softmax(s, dim=-2)
    elif way.softmax in ("max-axis", "unnormalised", "unnormalised-raw", "max-before-mask"):
        top = {"max-axis": lambda: s.amax(dim=-2, keepdim=True), "unnormalised": lambda: s.amax(dim=-1, keepdim=True),
               "unnormalised-raw": lambda: 0.0, "max-before-mask": lambda: raw.amax(dim=-1, keepdim=True)}
        e = torch.exp(s - top[way.softmax]())
        w = e if way.softmax.startswith("unnormalised") else e / e.sum(dim=-1, keepdim=True)
    else:
        w = torch.softmax(s, dim=-1)
    return w.masked_fill(hidden, 0.0) if way.mask == "after" else w


def merged(a, b):
    """The switches of two slips together (dataclasses of one kind), or None where both change the same step."""
    def changed(x):
        return {f.name: getattr(x, f.name) for f in fields(x) if getattr(x, f.name) != f.default}
    da, db = changed(a), changed(b)
    if set(da) & set(db):
        return None
    return replace(a, **db)


def pairs(entries) -> list[tuple[tuple[str, str], object]]:
    """Two slips of ``entries`` ((key, switches)) at once: ((key, key), their switches together), where they touch
    different steps."""
    out = []
    for (k1, a), (k2, b) in itertools.combinations(entries, 2):
        m = merged(a, b) if k1 != k2 else None
        if m is not None:
            out.append(((k1, k2), m))
    return out
