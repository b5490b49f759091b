"""The single-head lesson script: check the hand-written forms against PyTorch, look at one
causal attention map, and see what the 1/sqrt(d) scale does to the softmax.

Why the scale: for unit-variance queries and keys, a dot product over d features has variance d.
Unscaled, the scores spread further apart as heads get wider, the softmax saturates on one key
(peak weight near 1), and its gradients vanish. Dividing by sqrt(d) keeps the score variance at
1 for every width; dividing by d shrinks it to 1/d, so the softmax flattens toward uniform.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnlab.judge import oracle, rule
from attnlab.kernels import loops, matrix
from attnlab.nn.attention import SCALES, resolve_scale
from attnlab.nn.probe import entropy
from attnlab.results import Result, machine, versions

SCALE_LABELS = {"sqrt": "1/sqrt(d)", "none": "1 (no scale)", "inv": "1/d"}


@dataclass
class Check(Result):
    form: str
    causal: bool
    max_err: float  # max|mine - F.sdpa|, as the lesson prints it
    oracle_err: float  # max|mine - float64 oracle|
    torch_oracle_err: float  # max|F.sdpa - float64 oracle|
    allowed: float  # the tolerance rule's limit on oracle_err
    ok: bool


@dataclass
class DemoResult(Result):
    seed: int
    T: int
    d: int
    checks: list[Check]
    map_weights: list[list[float]]  # (T_map, T_map) causal attention weights
    widths: list[int]
    peak: dict[str, list[float]]  # scale name -> mean peak weight per width
    scale_T: int
    seconds: float
    machine: dict
    versions: dict

    def peak_at(self, d: int) -> dict[str, float]:
        i = self.widths.index(d)
        return {name: vals[i] for name, vals in self.peak.items()}


def row_stats(d: int, scale: float, T: int = 64, trials: int = 16, seed: int = 0) -> tuple[float, float]:
    """Mean peak weight (row max) and mean entropy (nats) of softmax(q k^T * scale) rows.

    q and k are unit-variance, T tokens, no mask; averaged over rows and ``trials`` draws.
    """
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(trials, T, d, generator=g)
    k = torch.randn(trials, T, d, generator=g)
    _, w = matrix.attention(q, k, k, scale=scale, return_weights=True)  # (trials, T, T)
    return w.amax(dim=-1).mean().item(), entropy(w).mean().item()


def run(seed: int = 0, T: int = 32, d: int = 64, map_T: int = 12, scale_T: int = 64) -> DemoResult:
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(T, d, generator=g) for _ in range(3))  # one head: (T, d)
    checks = []
    for name, form in (("matrix", matrix.attention), ("loops", loops.attention)):
        for causal in (False, True):
            mine = form(q, k, v, is_causal=causal)
            theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ref = oracle.reference(q, k, v, is_causal=causal)
            c = rule.compare("out", mine, theirs, ref, q.dtype, rule.rounding_floor(q, k, v, is_causal=causal)["out"])
            checks.append(Check(name, causal, rule.max_err(mine, theirs), c.err, c.torch_err, c.allowed, c.passed))

    qm, km, vm = (torch.randn(map_T, 16, generator=g) for _ in range(3))
    _, w = matrix.attention(qm, km, vm, is_causal=True, return_weights=True)

    widths = [2**p for p in range(2, 11)]  # 4 .. 1024
    peak = {name: [row_stats(dd, resolve_scale(name, dd), T=scale_T, seed=seed + dd)[0] for dd in widths]
            for name in SCALES}
    return DemoResult(seed, T, d, checks, w.tolist(), widths, peak, scale_T, time.perf_counter() - t0,
                      machine(), versions())
