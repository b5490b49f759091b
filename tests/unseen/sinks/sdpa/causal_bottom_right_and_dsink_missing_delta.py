"""Sink-aware SDPA ported from a FlashAttention kernel: query-block loop, dense scores per block, a custom
autograd.Function whose backward recomputes P from the saved lse (which includes the sink).
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "is_causal uses FlashAttention's bottom-right diagonal (key j visible iff j <= i + S - L) instead of SDPA's "
        "upper-left one (j <= i), so causal calls with L != S attend the wrong keys",
        "the backward computes dsink = -sum(p_sink) without the D = rowsum(dO * O) factor, so the sinks' gradient is "
        "wrong whenever sinks are given",
    ],
    "kind": "two",
}

BLOCK_M = 8


def _bias(L, S, attn_mask, is_causal, cdt, device):
    bias = torch.zeros(L, S, dtype=cdt, device=device)
    if is_causal:
        i = torch.arange(L, device=device).unsqueeze(1)
        j = torch.arange(S, device=device).unsqueeze(0)
        bias = bias.masked_fill(j > i + (S - L), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(cdt)
    return bias


class _SinkFlash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, bias, scale):
        L = q.shape[-2]
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
        sink = sinks.view(1, -1, 1, 1)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(L, i0 + BLOCK_M)
            s = torch.matmul(q[..., i0:i1, :], k.transpose(-2, -1)) * scale + bias[..., i0:i1, :]
            m = torch.maximum(s.amax(-1, keepdim=True), sink)
            p = torch.exp(s - m)
            l_sum = p.sum(-1, keepdim=True) + torch.exp(sink - m)
            out[..., i0:i1, :] = torch.matmul(p, v) / l_sum
            lse[..., i0:i1] = (m + torch.log(l_sum)).squeeze(-1)
        ctx.save_for_backward(q, k, v, sinks, bias, out, lse)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, bias, out, lse = ctx.saved_tensors
        scale = ctx.scale
        L = q.shape[-2]
        dq = torch.empty_like(q)
        dk = torch.zeros_like(k)
        dv = torch.zeros_like(v)
        dsinks = torch.zeros_like(sinks)
        for i0 in range(0, L, BLOCK_M):
            i1 = min(L, i0 + BLOCK_M)
            qb, dob = q[..., i0:i1, :], dout[..., i0:i1, :]
            lb = lse[..., i0:i1].unsqueeze(-1)
            s = torch.matmul(qb, k.transpose(-2, -1)) * scale + bias[..., i0:i1, :]
            p = torch.exp(s - lb)
            delta = (dob * out[..., i0:i1, :]).sum(-1, keepdim=True)
            dv += torch.matmul(p.transpose(-2, -1), dob)
            ds = p * (torch.matmul(dob, v.transpose(-2, -1)) - delta)
            dq[..., i0:i1, :] = torch.matmul(ds, k) * scale
            dk += torch.matmul(ds.transpose(-2, -1), qb) * scale
            p_sink = torch.exp(sinks.view(1, -1, 1, 1) - lb)
            dsinks -= p_sink.sum(dim=(0, 2, 3))
        return dq, dk, dv, dsinks, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    *lead, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    q = query.to(cdt).reshape(-1, H, L, E)
    k = key.to(cdt).reshape(-1, Hkv, S, E)
    v = value.to(cdt).reshape(-1, Hkv, S, Ev)
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    bias = _bias(L, S, attn_mask, is_causal, cdt, query.device).expand(*lead, H, L, S).reshape(-1, H, L, S)
    sk = torch.full((H,), torch.finfo(cdt).min, dtype=cdt, device=query.device) if sinks is None else sinks.to(cdt)
    out = _SinkFlash.apply(q, k, v, sk, bias, scale)
    return out.reshape(*lead, H, L, Ev).to(query.dtype)
