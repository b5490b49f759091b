"""Softmax one tile of keys at a time: the trick inside flash attention.

softmax needs the max of the whole row (for stability) and the sum of the whole row (to
normalise) -- but flash attention never holds a whole row of scores. It walks the keys in tiles
and keeps three running numbers per query (Milakov & Gimelshein 2018, arXiv:1805.02867; Dao et al.
2022, arXiv:2205.14135):

    m   the largest score seen so far
    l   the sum of exp(score - m) so far          (the normaliser)
    acc the sum of exp(score - m) * value so far  (the unnormalised output)

When a tile brings a larger score, m moves up to m_new, and everything summed so far was computed
against the old m: multiplying l and acc by exp(m_old - m_new) rescales it to the new one. After
the last tile, acc / l is exactly softmax(scores) @ values, though no step saw the whole row.
This file writes the algorithm out independently, on one query, and records every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnlab.kernels import matrix
from attnlab.results import Result, machine, versions


@dataclass
class Step(Result):
    tile: int
    keys: list[int]  # [start, end)
    scores: list[float]  # this tile's scaled scores
    tile_max: float
    m_old: float | None  # None before the first tile (minus infinity)
    m_new: float
    rescale: float  # exp(m_old - m_new): what l and acc are multiplied by (0 on the first tile: nothing yet)
    l: float  # running normaliser after this tile
    acc: list[float]  # running unnormalised output after this tile
    out: list[float]  # acc / l: the output if the row ended here


@dataclass
class OnlineSoftmaxResult(Result):
    seed: int
    S: int
    d: int
    tile: int
    scores: list[float]  # the whole row, for comparison only
    steps: list[Step]
    weights_online: list[float]  # exp(score - m_final) / l_final
    weights_softmax: list[float]  # torch.softmax of the whole row
    out_online: list[float]
    out_full: list[float]  # the matrix form on the whole row
    weight_err: float
    out_err: float
    rescales: int  # tiles that moved the running max after the first
    machine: dict
    versions: dict


def trace(scores: torch.Tensor, values: torch.Tensor, tile: int) -> list[Step]:
    """The online softmax over one row of scores (S,) and values (S, d), ``tile`` keys at a time."""
    S, d = values.shape
    m, l, acc = -math.inf, 0.0, torch.zeros(d, dtype=values.dtype)
    steps = []
    for t, k0 in enumerate(range(0, S, tile)):
        s, v = scores[k0:k0 + tile], values[k0:k0 + tile]  # (b,), (b, d)
        m_new = max(m, s.max().item())
        rescale = math.exp(m - m_new)  # exp(-inf) = 0 on the first tile
        p = torch.exp(s - m_new)  # (b,): this tile's exps against the new max
        l = l * rescale + p.sum().item()
        acc = acc * rescale + p @ v  # (d,)
        steps.append(Step(t, [k0, min(S, k0 + tile)], s.tolist(), s.max().item(), None if m == -math.inf else m,
                          m_new, rescale, l, acc.tolist(), (acc / l).tolist()))
        m = m_new
    return steps


def run(seed: int = 0, S: int = 12, d: int = 4, tile: int = 4) -> OnlineSoftmaxResult:
    if S < 1 or d < 1 or tile < 1:
        raise ValueError(f"S, d and tile must be positive, got S={S}, d={d}, tile={tile}")
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, d, generator=g, dtype=torch.float64)
    k = torch.randn(S, d, generator=g, dtype=torch.float64)
    v = torch.randn(S, d, generator=g, dtype=torch.float64)
    scores = (q @ k.T)[0] / math.sqrt(d)  # (S,)
    steps = trace(scores, v, tile)
    last = steps[-1]
    w_online = torch.exp(scores - last.m_new) / last.l
    w_full = torch.softmax(scores, dim=-1)
    out_online = torch.tensor(last.out, dtype=torch.float64)
    out_full = matrix.attention(q, k, v)[0]  # (d,)
    rescales = sum(1 for s in steps[1:] if s.m_new > s.m_old)
    return OnlineSoftmaxResult(seed, S, d, tile, scores.tolist(), steps, w_online.tolist(), w_full.tolist(),
                               out_online.tolist(), out_full.tolist(), (w_online - w_full).abs().max().item(),
                               (out_online - out_full).abs().max().item(), rescales, machine(), versions())


def finding(r: OnlineSoftmaxResult) -> str:
    ms = " -> ".join(f"{s.m_new:.2f}" for s in r.steps)
    ls = " -> ".join(f"{s.l:.2f}" for s in r.steps)
    return (f"{r.S} keys in tiles of {r.tile}: the running max went {ms} ({r.rescales} rescale(s) of the sums so far), "
            f"the normaliser {ls}. After the last tile the weights match the full softmax to {r.weight_err:.1e} and "
            f"the output matches the matrix form to {r.out_err:.1e} (float64), though no step saw the whole row.")


RESULT = OnlineSoftmaxResult
