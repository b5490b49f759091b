"""Designed inputs: what a probe gives a function, so that its answer reads as one part of its semantics.

Attention's semantics are small and exact, and a few designed inputs lay each part bare:

* ``weights`` -- q = 0, so every score is equal (to the bias, where there is one); v one-hot per key position
  (key j's value is e_j). Output row i is then ``Σ_j P_ij e_j``: **the attention weights themselves** -- which
  keys each query sees (the mask, the alignment, the window, the packing, the pages), what a row that sees no key
  gets, and from the log-weights the bias added to each score;
* ``heads`` -- q = 0 and v one-hot per kv head (every key of kv head g holds e_g): query head h's output is
  e_g for the kv head it reads -- the head map;
* ``scores`` -- key 0 is e_0, every other key 0, and query i is x_i e_0: query i's raw scores are (x_i, 0, 0, ...),
  so ``log(P_i0 / P_i1)`` is ``g(x_i) - g(0)``, the function's score function (its scale, its soft-cap);
* ``grads`` -- the weights inputs with dO one-hot per query (query i's gradient is e_i): then dV = Pᵀ dO holds the
  P the backward uses, dV[j, i] = P_ij.

The raw scores x_i are whole numbers up to 256, exact in every dtype judged.
"""

from __future__ import annotations

import math

import torch

KINDS = ("weights", "heads", "scores", "grads")
SPAN = 12.0  # the scaled scores of the scores probe run from -SPAN to SPAN


def raw_scores(L: int, scale: float, span: float = SPAN) -> torch.Tensor:
    """(L,) whole numbers x_i whose scaled scores ``scale * x_i`` run evenly over [-span, span] (at most |256|)."""
    t = torch.linspace(-span, span, L, dtype=torch.float64)
    return (t / scale).round().clamp(-256, 256)


def designed(case, q, k, v, mask, dense, grad_out):
    """The inputs of a probe case (``case.probe`` one of :data:`KINDS`) in place of the drawn ones, same shapes,
    dtypes and devices; the mask (and its dense twin) as drawn."""
    kind = case.probe
    S, Ev = k.shape[-2], v.shape[-1]
    if kind in ("weights", "grads", "scores") and Ev < S:
        raise ValueError(f"probe {case.name!r}: {S} keys need a value dim of at least {S} (it is {Ev})")
    q = torch.zeros_like(q)
    if kind == "heads":
        Hkv = v.shape[-3]
        if Hkv > Ev:
            raise ValueError(f"probe {case.name!r}: {Hkv} kv heads need a value dim of at least {Hkv}")
        v = torch.zeros_like(v)
        for g in range(Hkv):
            v[..., g, :, g] = 1
        return q, k, v, mask, dense, grad_out
    v = _one_hot(v, S)
    if kind == "grads":
        L = grad_out.shape[-2]
        if Ev < L:
            raise ValueError(f"probe {case.name!r}: {L} queries need a value dim of at least {L}")
        grad_out = _one_hot(grad_out, L)
    if kind == "scores":
        scale = 1.0 / math.sqrt(q.shape[-1]) if case.scale is None else float(case.scale)
        x = raw_scores(q.shape[-2], scale, span_of(case))
        q = torch.zeros_like(q)
        q[..., 0] = x.to(q.dtype).to(q.device)
        k = torch.zeros_like(k)
        k[..., 0, 0] = 1
    return q, k, v, mask, dense, grad_out


def span_of(case) -> float:
    """How far the scores probe's scaled scores run: further where the case asks for large logits."""
    return SPAN * (case.magnitude if case.magnitude > 1 else 1.0)


def _one_hot(t: torch.Tensor, n: int) -> torch.Tensor:
    """t's shape (..., n, D >= n): row j is e_j."""
    out = torch.zeros_like(t)
    idx = torch.arange(n, device=t.device)
    out[..., idx, idx] = 1
    return out
