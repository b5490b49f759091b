"""SDPA as an autograd.Function with a hand-written FlashAttention-style backward (recomputes P from the lse)."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the hand-written backward forgets to multiply dS by the softmax scale, so grad_query and grad_key are "
        "off by the factor 1/scale (the forward output and grad_value are right)"
    ],
    "kind": "semantic",
}


def _expand_kv(t, H, enable_gqa):
    if enable_gqa and t.shape[-3] != H:
        return t.repeat_interleave(H // t.shape[-3], dim=-3)
    return t


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
    def forward(ctx, q, k, v, bias, scale, enable_gqa):
        acc = torch.float64 if q.dtype == torch.float64 else torch.float32
        H = q.shape[-3]
        qf = q.to(acc)
        kf = _expand_kv(k, H, enable_gqa).to(acc)
        vf = _expand_kv(v, H, enable_gqa).to(acc)
        s = qf @ kf.transpose(-2, -1) * scale + bias
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        denom = e.sum(-1, keepdim=True)
        lse = torch.where(denom > 0, m + torch.log(denom), torch.full_like(denom, float("inf")))
        o = (e / torch.where(denom > 0, denom, torch.ones_like(denom))) @ vf
        ctx.save_for_backward(q, k, v, bias, o, lse)
        ctx.scale, ctx.enable_gqa = scale, enable_gqa
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias, o, lse = ctx.saved_tensors
        scale = ctx.scale
        acc = o.dtype
        H, Hkv = q.shape[-3], k.shape[-3]
        qf = q.to(acc)
        kf = _expand_kv(k, H, ctx.enable_gqa).to(acc)
        vf = _expand_kv(v, H, ctx.enable_gqa).to(acc)
        do = do.to(acc)
        p = torch.exp(qf @ kf.transpose(-2, -1) * scale + bias - lse)
        dv = p.transpose(-2, -1) @ do
        dp = do @ vf.transpose(-2, -1)
        delta = (do * o).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = ds @ kf
        dk = ds.transpose(-2, -1) @ qf
        if ctx.enable_gqa and Hkv != H:
            g = H // Hkv
            dk = dk.unflatten(-3, (Hkv, g)).sum(-3)
            dv = dv.unflatten(-3, (Hkv, g)).sum(-3)
        dk = dk.sum_to_size(k.shape)
        dv = dv.sum_to_size(v.shape)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    bias = _bias(query.shape[-2], key.shape[-2], attn_mask, is_causal, acc, query.device)
    return _Attn.apply(query, key, value, bias, scale, enable_gqa)
