import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct"
}



def _sum_to(x, shape):
    """Reduce a broadcast gradient back to `shape`."""
    while x.dim() > len(shape):
        x = x.sum(0)
    for d, n in enumerate(shape):
        if n == 1 and x.shape[d] != 1:
            x = x.sum(d, keepdim=True)
    return x


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, allowed, scale, groups, out_dtype):
        kx = k.repeat_interleave(groups, dim=-3) if groups > 1 else k
        vx = v.repeat_interleave(groups, dim=-3) if groups > 1 else v
        s = torch.matmul(q, kx.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias
        if allowed is not None:
            s = s.masked_fill(~allowed, float('-inf'))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        seen = l > 0
        l1 = torch.where(seen, l, torch.ones_like(l))
        out = torch.matmul(e / l1, vx)
        lse = torch.where(seen, m + torch.log(l1), torch.full_like(l, float('-inf')))
        ctx.save_for_backward(q, k, v, bias, allowed, out, lse)
        ctx.scale, ctx.groups = scale, groups
        return out.to(out_dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, bias, allowed, out, lse = ctx.saved_tensors
        scale, groups = ctx.scale, ctx.groups
        dout = dout.to(q.dtype)
        kx = k.repeat_interleave(groups, dim=-3) if groups > 1 else k
        vx = v.repeat_interleave(groups, dim=-3) if groups > 1 else v
        s = torch.matmul(q, kx.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias
        if allowed is not None:
            s = s.masked_fill(~allowed, float('-inf'))
        lse = lse.to(s.dtype)
        p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse))
        dvx = torch.matmul(p.transpose(-1, -2), dout)
        dp = torch.matmul(dout, vx.transpose(-1, -2))
        delta = (dout * out).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, kx) * scale
        dkx = torch.matmul(ds.transpose(-1, -2), q) * scale
        if groups > 1:
            dkx = dkx.unflatten(-3, (k.shape[-3], groups)).sum(-3)
            dvx = dvx.unflatten(-3, (v.shape[-3], groups)).sum(-3)
        dbias = None
        if bias is not None and ctx.needs_input_grad[3]:
            dbias = _sum_to(ds, bias.shape)
        return _sum_to(dq, q.shape), _sum_to(dkx, k.shape), _sum_to(dvx, v.shape), dbias, None, None, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.shape[-1]
    L, S = query.shape[-2], key.shape[-2]
    scale = E ** -0.5 if scale is None else scale
    wt = torch.float64 if query.dtype == torch.float64 else torch.float32
    groups = query.shape[-3] // key.shape[-3] if enable_gqa else 1
    allowed = None
    if is_causal:
        allowed = torch.ones(L, S, dtype=torch.bool).tril()
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = attn_mask if allowed is None else allowed & attn_mask
        else:
            bias = attn_mask.to(wt)
    return _Attention.apply(query.to(wt), key.to(wt), value.to(wt), bias, allowed, scale, groups, query.dtype)
