"""The float64 oracle and the one tolerance rule.

The oracle computes attention in float64 on the CPU, written independently of the forms it
judges (GQA by viewing query heads in groups, fully masked rows zeroed explicitly).

The tolerance rule, after FlashAttention's tests: on the same inputs, a form passes when

    max|form - oracle|  <=  2 * max|PyTorch - oracle|  +  floor

where ``floor`` is twice the error of merely *storing* the oracle's answer in the input dtype
(so a case in which PyTorch happens to be exact still leaves room for honest rounding). Both
errors are reported; nothing hides in ``allclose`` defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.kernels._check import check, check_score_mod
from attnlab.kernels.mods import apply_dense


def reference(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
              grad_out=None, keep=None, dropout_p=0.0, score_mod=None):
    """Float64 attention. Returns ``out`` or, with ``grad_out``, ``(out, dq, dk, dv[, dmask][, dparams...])``.

    ``keep`` (bool, broadcastable to (N, H, L, S)) applies dropout with a known keep-mask: the
    surviving weights are scaled by 1 / (1 - dropout_p). ``score_mod`` (an :class:`attnlab.mods.Mod`,
    best built on float64 tensors) is applied to the scaled scores before the mask; with ``grad_out``
    the gradients of its params that require grad come last.
    """
    want = grad_out is not None
    q, k, v = (t.detach().double().cpu().requires_grad_(want) for t in (query, key, value))
    m = attn_mask
    if isinstance(attn_mask, torch.Tensor):
        m = attn_mask.detach().cpu()
        if m.dtype != torch.bool:
            m = m.double().requires_grad_(want and attn_mask.requires_grad)
    a = check(q, k, v, m, 0.0, is_causal, scale, enable_gqa)
    mask = a.dense_mask()
    G = a.groups
    qg = a.q.reshape(a.N, a.Hkv, G, a.L, a.E)  # query heads in groups that share one key head
    scores = torch.einsum("nkgle,nkse->nkgls", qg, a.k) * a.scale  # (N, Hkv, G, L, S)
    scores = scores.reshape(a.N, a.H, a.L, a.S)
    mod = check_score_mod(score_mod)
    scores = apply_dense(mod, scores)  # the score modifier, if any, before the mask
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # rows with no visible key
    weights = torch.softmax(torch.where(dead, torch.zeros_like(scores), scores), dim=-1)
    weights = torch.where(dead, torch.zeros_like(weights), weights)
    if keep is not None:
        weights = weights * keep.double() / (1.0 - dropout_p)
    out = torch.einsum("nkgls,nksv->nkglv", weights.view(a.N, a.Hkv, G, a.L, a.S), a.v)
    out = out.reshape(a.N, a.H, a.L, a.Ev)
    if grad_out is None:
        return a.unflatten(out.detach())
    g = grad_out.detach().double().cpu().reshape(out.shape)
    wrt = [q, k, v] + ([m] if isinstance(m, torch.Tensor) and m.requires_grad else [])
    wrt += [t for t in (mod.params if mod is not None else ()) if t.requires_grad]
    grads = torch.autograd.grad(out, wrt, g)
    return (a.unflatten(out.detach()), *grads)


def max_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.detach().double().cpu() - ref.detach().double().cpu()).abs().max().item()


def mean_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return (x.detach().double().cpu() - ref.detach().double().cpu()).abs().mean().item()


def floor(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Twice the error of storing ``ref`` in ``dtype``, plus a hair for exactly representable cases."""
    stored = ref.detach().to(dtype).double()
    return 2.0 * (stored - ref.detach().double()).abs().max().item() + 1e-12


@dataclass(frozen=True)
class Comparison:
    """One quantity (out, dq, dk, dv, dmask) of one case: the form's error, PyTorch's, the limit."""

    quantity: str
    err: float
    mean_err: float
    torch_err: float
    allowed: float
    passed: bool


def compare(quantity: str, mine: torch.Tensor, theirs: torch.Tensor, ref: torch.Tensor,
            dtype: torch.dtype) -> Comparison:
    """Apply the tolerance rule to ``mine`` given PyTorch's ``theirs`` and the float64 ``ref``."""
    if mine.shape != ref.shape:
        return Comparison(quantity, float("inf"), float("inf"), max_err(theirs, ref), 0.0, False)
    err, terr = max_err(mine, ref), max_err(theirs, ref)
    allowed = 2.0 * terr + floor(ref, dtype)
    ok = bool(err <= allowed) and bool(torch.isfinite(mine.detach()).all())
    return Comparison(quantity, err, mean_err(mine, ref), terr, allowed, ok)
