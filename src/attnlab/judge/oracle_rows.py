"""The float64 oracle a slice of query rows at a time: the same numbers in O(T) memory.

The oracle of :mod:`attnlab.judge.oracle` holds the whole (N, H, L, S) matrix of scores in float64,
and autograd keeps several such matrices for the backward pass: at T = 16384 with 4 heads one of
them is 8.6 GB. The rows of attention are independent of each other, so the same answer can be
computed for a few query rows at a time; only the key and value gradients gather over rows, and
they are summed slice by slice. For rows i of one slice:

    P    = softmax(q_i kᵀ · scale)              weights, (rows, S)
    out_i = P v
    dv  += Pᵀ dout_i
    dP   = dout_i vᵀ,   D = rowsum(dout_i ∘ out_i)
    dS   = P ∘ (dP − D)
    dq_i = dS k · scale,   dk += dSᵀ q_i · scale

The backward is written out by hand rather than taken from autograd (which would keep every
slice alive); the tests hold it to the full oracle. It covers what ring attention takes: no mask
or ``is_causal`` (aligned upper-left, as PyTorch does), grouped-query heads and any scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attnlab.kernels.argcheck import positive_int

SLICE_BYTES = 64 * 2**20  # float64 scores of one slice of rows; a few such buffers are alive at once


def reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False, grad_out: torch.Tensor | None = None,
              slice_bytes: int = SLICE_BYTES, progress: Callable[[int, int], None] | None = None):
    """Float64 attention of (N, H, L, E) inputs. Returns ``out`` or, with ``grad_out``, ``(out, dq, dk, dv)``.

    ``progress(done, total)`` is called after each slice of query rows.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D (N, H, length, dim) tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    N, H, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    if key.shape[:3] != value.shape[:3] or key.shape[0] != N or key.shape[3] != E:
        raise ValueError(f"shapes do not match: query {tuple(query.shape)}, key {tuple(key.shape)}, "
                         f"value {tuple(value.shape)}")
    if Hkv != H and not (enable_gqa and H % Hkv == 0):
        raise ValueError(f"key has {Hkv} heads but query has {H}; pass enable_gqa=True with a divisor of {H}")
    positive_int("slice_bytes", slice_bytes)
    G = H // Hkv
    scale = 1.0 / math.sqrt(E) if scale is None else float(scale)
    q = query.detach().double().cpu().reshape(N, Hkv, G, L, E)  # query heads in groups sharing a key head
    k, v = key.detach().double().cpu(), value.detach().double().cpu()
    out = torch.empty(N, Hkv, G, L, Ev, dtype=torch.float64)
    want = grad_out is not None
    if want:
        go = grad_out.detach().double().cpu().reshape(N, Hkv, G, L, Ev)
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
    rows = max(1, slice_bytes // max(1, N * H * S * 8))
    cols = torch.arange(S)
    for i0 in range(0, L, rows):
        i1 = min(L, i0 + rows)
        qi = q[:, :, :, i0:i1]
        s = torch.einsum("nkgle,nkse->nkgls", qi, k).mul_(scale)  # (N, Hkv, G, rows, S)
        if is_causal:
            s.masked_fill_(cols.view(1, -1) > torch.arange(i0, i1).view(-1, 1), float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        p = s.sub_(torch.where(torch.isneginf(m), 0.0, m)).exp_()
        total = p.sum(dim=-1, keepdim=True)
        p = p.div_(torch.where(total == 0, 1.0, total))  # a row that sees no key: weights 0, as PyTorch
        oi = torch.einsum("nkgls,nksv->nkglv", p, v)
        out[:, :, :, i0:i1] = oi
        if want:
            gi = go[:, :, :, i0:i1]
            dv += torch.einsum("nkgls,nkglv->nksv", p, gi)
            dp = torch.einsum("nkglv,nksv->nkgls", gi, v)
            ds = p.mul_(dp.sub_((gi * oi).sum(dim=-1, keepdim=True)))  # P ∘ (dP − D), in place of P
            dq[:, :, :, i0:i1] = torch.einsum("nkgls,nkse->nkgle", ds, k) * scale
            dk += torch.einsum("nkgls,nkgle->nkse", ds, qi) * scale
        if progress is not None:
            progress(i1, L)
    out = out.reshape(N, H, L, Ev)
    return (out, dq.reshape(N, H, L, E), dk, dv) if want else out
