"""SDPA with sinks as an autograd.Function: float32 forward that saves out and lse; the backward recomputes P and
gets the sink's probability for free as what the keys leave over, p_sink = 1 - rowsum(P).

P is rounded to the input dtype for the dP/dV matmuls, FlashAttention style.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the backward takes p_sink = 1 - rowsum(P) with P rounded to the input dtype, so when the sink's share is "
             "small (sinks a few units below the scores) the cancellation leaves dsink with a large relative error "
             "(1e-3 in float32, order 1 in bfloat16)"],
    "kind": "precision",
}


class _SinkSDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, bias, scale, io_dtype):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale + bias
        sink = sinks.view(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)
        lse = torch.logsumexp(torch.cat([s, sink], dim=-1), dim=-1, keepdim=True)
        p = torch.exp(s - lse)
        out = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, sinks, bias, out, lse)
        ctx.scale, ctx.io_dtype = scale, io_dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, bias, out, lse = ctx.saved_tensors
        scale = ctx.scale
        s = torch.matmul(q, k.transpose(-2, -1)) * scale + bias
        p = torch.exp(s - lse).to(ctx.io_dtype).to(q.dtype)
        delta = (dout * out).sum(-1, keepdim=True)
        dv = torch.matmul(p.transpose(-2, -1), dout)
        ds = p * (torch.matmul(dout, v.transpose(-2, -1)) - delta)
        dq = torch.matmul(ds, k) * scale
        dk = torch.matmul(ds.transpose(-2, -1), q) * scale
        p_sink = 1.0 - p.sum(-1, keepdim=True)
        dsinks = -(p_sink * delta).sum(dim=(0, 2, 3))
        return dq, dk, dv, dsinks, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
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
    bias = torch.zeros(L, S, dtype=cdt, device=query.device)
    if is_causal:
        bias = bias.masked_fill(torch.ones(L, S, dtype=torch.bool, device=query.device).triu(1), float("-inf"))
    if attn_mask is not None:
        bias = bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else bias + attn_mask
    bias = bias.to(cdt).expand(*lead, H, L, S).reshape(-1, H, L, S)
    sk = torch.full((H,), torch.finfo(cdt).min, dtype=cdt, device=query.device) if sinks is None else sinks.to(cdt)
    out = _SinkSDPA.apply(q, k, v, sk, bias, scale, query.dtype)
    return out.reshape(*lead, H, L, Ev).to(query.dtype)
