"""SDPA with sinks as a custom autograd.Function: dense forward that keeps the (L, S) probabilities and the sink's
probability column, and a hand-written backward using dS = P * (dP - D).
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the hand-written backward returns dsink = +sum(p_sink * D) instead of -sum(p_sink * D), so the sinks' "
             "gradient has the wrong sign (forward and dq, dk, dv are right)"],
    "kind": "semantic",
}


class _DenseSinkAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, bias, scale):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale + bias
        sink_col = sinks.view(-1, 1, 1).expand(*s.shape[:-1], 1)
        full = torch.cat([s, sink_col], dim=-1)
        mx = full.amax(dim=-1, keepdim=True)
        p_full = torch.exp(full - mx)
        p_full = p_full / p_full.sum(dim=-1, keepdim=True)
        p, p_sink = p_full[..., :-1], p_full[..., -1]
        out = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, p, p_sink, out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, p, p_sink, out = ctx.saved_tensors
        dv = torch.matmul(p.transpose(-2, -1), dout)
        dp = torch.matmul(dout, v.transpose(-2, -1))
        delta = (dout * out).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, k) * ctx.scale
        dk = torch.matmul(ds.transpose(-2, -1), q) * ctx.scale
        dsinks = (p_sink * delta.squeeze(-1)).sum(dim=(0, 2))
        return dq, dk, dv, dsinks, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    *lead, H, L, E = query.shape
    Hkv, S = key.shape[-3], key.shape[-2]
    q = query.to(cdt).reshape(-1, H, L, E)
    k = key.to(cdt).reshape(-1, Hkv, S, E)
    v = value.to(cdt).reshape(-1, Hkv, S, value.shape[-1])
    if enable_gqa and Hkv != H:
        k = k.repeat_interleave(H // Hkv, dim=1)
        v = v.repeat_interleave(H // Hkv, dim=1)
    scale = 1.0 / math.sqrt(E) if scale is None else scale

    bias = torch.zeros(L, S, dtype=cdt, device=query.device)
    if is_causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(cdt)
    bias = bias.expand(*lead, H, L, S).reshape(-1, H, L, S)
    # no sink: a finite, hugely negative one keeps fully masked rows at 0 instead of 0/0
    sk = torch.full((H,), torch.finfo(cdt).min, dtype=cdt, device=query.device) if sinks is None else sinks.to(cdt)
    out = _DenseSinkAttn.apply(q, k, v, sk, bias, scale)
    return out.reshape(*lead, H, L, value.shape[-1]).to(query.dtype)
