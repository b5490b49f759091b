"""SDPA as a custom autograd.Function: the forward saves the float32 log-sum-exp, the backward recomputes P.

Backward is the FlashAttention-2 recipe: D = rowsum(dO * O), dS = P * (dP - D), then dQ, dK, dV.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the hand-written backward computes dK = dS^T @ Q without multiplying by the softmax scale, so key.grad is "
        "1/scale times too large (forward, query.grad and value.grad are right)"
    ],
    "kind": "semantic",
}


def _bias(L, S, attn_mask, is_causal, dtype, device):
    bias = torch.zeros(L, S, dtype=dtype, device=device)
    if is_causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(dtype)
    return bias


class _Attn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, scale, n_rep):
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=-3)
            v = v.repeat_interleave(n_rep, dim=-3)
        s = q @ k.transpose(-1, -2) * scale + bias
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse = torch.where(torch.isfinite(lse), lse, torch.full_like(lse, float("inf")))
        p = torch.exp(s - lse)
        o = p @ v
        ctx.save_for_backward(q, k, v, bias, o, lse)
        ctx.scale, ctx.n_rep = scale, n_rep
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias, o, lse = ctx.saved_tensors
        scale, n_rep = ctx.scale, ctx.n_rep
        p = torch.exp(q @ k.transpose(-1, -2) * scale + bias - lse)
        dv = p.transpose(-1, -2) @ do
        dp = do @ v.transpose(-1, -2)
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = ds @ k * scale
        dk = ds.transpose(-1, -2) @ q
        if n_rep > 1:
            shp = dk.shape[:-3] + (dk.shape[-3] // n_rep, n_rep) + dk.shape[-2:]
            dk = dk.reshape(shp).sum(-3)
            dv = dv.reshape(shp).sum(-3)
        return dq, dk, dv, None, None, None


def _reduce_to(grad, shape):
    while grad.dim() > len(shape):
        grad = grad.sum(0)
    for i, n in enumerate(shape):
        if n == 1 and grad.shape[i] != 1:
            grad = grad.sum(i, keepdim=True)
    return grad


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    L, S = query.shape[-2], key.shape[-2]
    sm_scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    n_rep = query.shape[-3] // key.shape[-3] if enable_gqa else 1
    bias = _bias(L, S, attn_mask, is_causal, ct, query.device)
    batch = torch.broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3])
    q = query.to(ct).expand(*batch, *query.shape[-3:])
    k = key.to(ct).expand(*batch, *key.shape[-3:])
    v = value.to(ct).expand(*batch, *value.shape[-3:])
    out = _Attn.apply(q, k, v, bias, sm_scale, n_rep)
    return out.to(query.dtype)
