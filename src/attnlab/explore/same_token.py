"""Attention cannot tell where a token is unless you tell it.

Queries, keys and values are computed from each token's vector alone. Put the same word at two
positions and, with no position information, both copies get the same query, the same key and
the same value -- and with no mask, the same output: attention is a function of a *set*. Rotary
position embedding (RoPE, Su et al. 2021, arXiv:2104.09864) rotates each query and key by an
angle proportional to its position (here attnlab's own, :mod:`attnlab.nn.rope`), so the two copies
now ask different questions. The values are not rotated. (A causal mask also breaks the tie: each
copy sees a different prefix -- which is one reason decoders learn some sense of position even
without any position embedding.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.explore._common import embed, max_abs, projections
from attnlab.kernels import matrix
from attnlab.nn import rope as rotary
from attnlab.results import Result, machine, versions

WORDS = ["the", "cat", "saw", "the", "dog"]


@dataclass
class Diffs(Result):
    query: float  # max|q[i] - q[j]| between the two copies
    key: float
    value: float
    out: float  # no mask
    out_causal: float  # with the causal mask


@dataclass
class SameTokenResult(Result):
    seed: int
    tokens: list[str]
    positions: list[int]  # where the repeated word sits
    d_head: int
    without_positions: Diffs
    with_rope: Diffs
    machine: dict
    versions: dict


def _diffs(q, k, v, i, j) -> Diffs:
    out = matrix.attention(q, k, v)
    out_c = matrix.attention(q, k, v, is_causal=True)
    return Diffs(max_abs(q[i], q[j]), max_abs(k[i], k[j]), max_abs(v[i], v[j]), max_abs(out[i], out[j]),
                 max_abs(out_c[i], out_c[j]))


def run(seed: int = 0, d_model: int = 16, d_head: int = 8) -> SameTokenResult:
    i, j = [p for p, w in enumerate(WORDS) if w == "the"]
    x = embed(WORDS, d_model, seed)  # (T, d_model)
    wq, wk, wv = projections(d_model, d_head, seed + 1)
    q, k, v = x @ wq, x @ wk, x @ wv  # (T, d_head)
    plain = _diffs(q, k, v, i, j)
    pos = torch.arange(len(WORDS))
    rotated = _diffs(rotary.apply(q, pos), rotary.apply(k, pos), v, i, j)  # the values are not rotated
    return SameTokenResult(seed, list(WORDS), [i, j], d_head, plain, rotated, machine(), versions())


def finding(r: SameTokenResult) -> str:
    a, b = r.with_rope, r.without_positions
    i, j = r.positions
    return (f"'{r.tokens[i]}' at positions {i} and {j}: without positions the two copies differ by "
            f"{b.query:g} in query, {b.key:g} in key and {b.out:g} in output; with RoPE by {a.query:.3f} "
            f"(query), {a.key:.3f} (key) and {a.out:.3f} (output), values untouched ({a.value:g}). "
            f"A causal mask alone already separates them ({b.out_causal:.3f}): each copy sees a different prefix.")


RESULT = SameTokenResult
