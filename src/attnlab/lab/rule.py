"""The one tolerance rule, after FlashAttention's tests, and the rounding floor it stands on.

On the same inputs, for each quantity (the output and each gradient) a form passes when

    max|form - oracle|  <=  2 * max|PyTorch - oracle|  +  floor

where the oracle is the float64 reference of :mod:`attnlab.lab.oracle` and PyTorch runs in the
input dtype. The ``floor`` is the rounding error the input dtype allows for the sums that make
that quantity, derived from the computation itself rather than fixed: every sum of n products may
be off by

    u * sqrt(n) * sum|product|          (u = the dtype's machine epsilon, torch.finfo(dtype).eps)

and these errors are carried, to first order, from the scores (n = E) through the softmax into
the output (n = S), and through dP = dO V^T (n = Ev), D = rowsum(dO * O) and
dS = P * (dP - D) into dq (n = S), dk (n = L) and dv (n = L); see :func:`rounding_floor`. The
floor is the largest such bound over the quantity's elements, plus twice the error of merely
storing the oracle's answer in the dtype. It grows with the size of the numbers, so the rule holds
for every seed, and it is ~1e-6 (float32) of the quantities' size, so a wrong form still fails.
With ``dtype=float64`` the same floor is what PyTorch's float64 answer must meet against the
oracle: the cross-check that the oracle itself is right.

Every number is reported; nothing hides in ``allclose`` defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import oracle
from .results import Result

NO_GRADS = {"out": 0.0, "dq": 0.0, "dk": 0.0, "dv": 0.0, "dmask": 0.0}


def rounding_floor(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                   grad_out=None, keep=None, dropout_p=0.0, dtype=None, score_mod=None) -> dict[str, float]:
    """The rounding budget of each quantity: ``{"out": ..., "dq": ..., "dk": ..., "dv": ..., "dmask": ...}``.

    First-order error propagation in float64, with u = ``torch.finfo(dtype).eps`` and every sum of
    n products allowed ``u * sqrt(n) * sum|product|`` (the probabilistic bound of Higham & Mary).
    Sums over a row's scores are bounded with norms (|q_i . k_j| <= |q_i| |k_j|), so that every
    error is a per-row number times the weights P, and the budget costs four products with P.
    A score modifier is taken not to amplify the scores' error (true of the built-ins: soft-capping's
    slope is at most 1, ALiBi and relative biases add a constant).
    """
    u = torch.finfo(dtype or query.dtype).eps
    with torch.no_grad():
        m = attn_mask.detach().cpu() if isinstance(attn_mask, torch.Tensor) else attn_mask
        if isinstance(m, torch.Tensor) and m.dtype.is_floating_point:
            m = m.double()
        f = oracle.forward(*(t.detach().double().cpu() for t in (query, key, value)), m, is_causal, scale,
                           enable_gqa, keep, dropout_p, score_mod)
        if f.P.numel() == 0:
            return dict(NO_GRADS)
        q, kx, vx, P, Pd, O = f.q, f.k, f.v, f.P, f.Pd, f.out
        N, H, L, E = q.shape
        S, Ev, G, sc = kx.shape[2], vx.shape[3], f.groups, abs(f.scale)
        drop = (1.0 / (1.0 - dropout_p) if dropout_p < 1 else 0.0) if keep is not None else 1.0
        # scores s = scale * q.k, E products, then the mask added and exp taken (relative u): per row,
        # the largest error over the row's keys. P_ij then moves by at most P_ij * rel_i.
        k_len = kx.norm(dim=-1).amax(dim=-1, keepdim=True).unsqueeze(-1)  # (N, H, 1, 1)
        s_err = u * (math.sqrt(E) * sc * q.norm(dim=-1, keepdim=True) * k_len + 1.0)  # (N, H, L, 1)
        rel = 2.0 * s_err + u * math.sqrt(S)
        Pv = Pd @ vx.abs()  # (N, H, L, Ev): the sum of |products| that makes the output
        o_err = (u * math.sqrt(S) + rel) * Pv
        fl = {"out": o_err.max()}
        if grad_out is not None:
            dO = grad_out.detach().double().cpu().reshape(O.shape)
            dO_len = dO.norm(dim=-1, keepdim=True)  # (N, H, L, 1)
            v_len = vx.norm(dim=-1).amax(dim=-1, keepdim=True).unsqueeze(-1) * drop  # (N, H, 1, 1)
            O_len = O.norm(dim=-1, keepdim=True)
            # dP = dO.v (Ev products) and D = dO.O (Ev products, O carrying its own error): per row
            gap = dO_len * (v_len + O_len)  # |dP - D| <= |dO| (|v| + |O|)
            dS_rel = (u * math.sqrt(Ev) * gap + (dO.abs() * o_err).sum(-1, keepdim=True) + rel * gap
                      + u * gap)  # dS_ij's error <= P_ij * dS_rel_i
            dS_mag = gap  # |dS_ij| <= P_ij * gap_i
            Pk = P @ kx.abs()  # (N, H, L, E)
            dq = sc * (dS_rel + u * math.sqrt(S) * dS_mag) * Pk
            dk = sc * (P.transpose(-2, -1) @ ((dS_rel + u * math.sqrt(L) * dS_mag) * q.abs()))
            dv = Pd.transpose(-2, -1) @ ((u * math.sqrt(L) + rel) * dO.abs())
            fl["dq"] = dq.max()
            fl["dk"] = dk.max() * G  # the G query heads of a group add into one key head
            fl["dv"] = dv.max() * G
            fl["dmask"] = (P * dS_rel).max() * max(1, N * H * L * S // max(1, _numel(attn_mask)))
    return {n: float(x) for n, x in fl.items()}


def _numel(m) -> int:
    return m.numel() if isinstance(m, torch.Tensor) and oracle.causal_variant(m) is None else 1


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    d = (x.detach().double().cpu() - ref.detach().double().cpu()).abs()
    return d.max().item() if d.numel() else 0.0


def mean_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    d = (x.detach().double().cpu() - ref.detach().double().cpu()).abs()
    return d.mean().item() if d.numel() else 0.0


def floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Twice the error of storing ``ref`` in ``dtype``, plus a hair for exactly representable cases."""
    if not ref.numel():
        return 1e-12
    stored = ref.detach().to(dtype).double()
    return 2.0 * (stored - ref.detach().double()).abs().max().item() + 1e-12


@dataclass(frozen=True)
class Comparison(Result):
    """One quantity (out, dq, dk, dv, dmask) of one case: the form's error, PyTorch's, the limit."""

    quantity: str
    err: float
    mean_err: float
    torch_err: float
    allowed: float
    passed: bool


def compare(quantity: str, mine: torch.Tensor, theirs: torch.Tensor, ref: torch.Tensor,
            dtype: torch.dtype, rounding: float = 0.0, theirs_ref: torch.Tensor | None = None) -> Comparison:
    """Apply the tolerance rule to ``mine`` given PyTorch's ``theirs`` and the float64 ``ref``.

    ``rounding`` is the quantity's computed rounding budget (:func:`rounding_floor`); ``theirs_ref``
    the oracle PyTorch's answer is measured against when it differs from ``ref`` (dropout).
    """
    terr = max_err(theirs, ref if theirs_ref is None else theirs_ref)
    if mine.shape != ref.shape:
        return Comparison(quantity, float("inf"), float("inf"), terr, 0.0, False)
    err = max_err(mine, ref)
    # PyTorch answering NaN where the oracle is finite (2.13's CPU kernel, is_causal with scale < 0) gives no
    # error to scale: the limit is then the rounding floor alone.
    allowed = (2.0 * terr if math.isfinite(terr) else 0.0) + rounding + floor(ref, dtype)
    ok = bool(err <= allowed) and bool(torch.isfinite(mine.detach()).all())
    return Comparison(quantity, err, mean_err(mine, ref), terr, allowed, ok)
