TRUTH = {'api': 'sdpa', 'bugs': ["The backward's delta is the plain row sum of dP instead of the row sum of P * dP; shows on every dq/dk/dmask gradient.", 'The GQA head map is h % Hkv instead of h // (H // Hkv); shows on GQA cases with Hkv > 1 (6 query heads over 2).'], 'kind': 'two'}
import math
import torch


def _sum_to(x, shape):
    while x.dim() > len(shape):
        x = x.sum(0)
    for d, n in enumerate(shape):
        if n == 1 and x.shape[d] != 1:
            x = x.sum(d, keepdim=True)
    return x


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, sc):
        s = torch.matmul(q, k.transpose(-1, -2)) * sc
        if bias is not None:
            s = s + bias
        s = s.masked_fill(~keep, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        l = torch.exp(s - m).sum(-1, keepdim=True)
        lse = torch.where(l > 0, m + torch.log(l), torch.full_like(l, math.inf))
        p = torch.exp(s - lse)
        out = torch.matmul(p, v)
        ctx.save_for_backward(q, k, v, p)
        ctx.sc = sc
        ctx.bias_shape = None if bias is None else bias.shape
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, p = ctx.saved_tensors
        sc = ctx.sc
        dv = torch.matmul(p.transpose(-1, -2), do)
        dp = torch.matmul(do, v.transpose(-1, -2))
        delta = dp.sum(-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, k) * sc
        dk = torch.matmul(ds.transpose(-1, -2), q) * sc
        dbias = None
        if ctx.bias_shape is not None:
            dbias = _sum_to(ds, ctx.bias_shape)
        return dq, _sum_to(dk, k.shape), _sum_to(dv, v.shape), dbias, None, None


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    H, L, E = query.shape[-3], query.shape[-2], query.shape[-1]
    Hkv, S = key.shape[-3], key.shape[-2]
    cdt = torch.float32 if query.dtype == torch.bfloat16 else query.dtype
    sc = scale if scale is not None else 1.0 / math.sqrt(E)
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    if enable_gqa and Hkv != H:
        hmap = torch.arange(H) % Hkv
        k, v = k.index_select(-3, hmap), v.index_select(-3, hmap)
    keep = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        keep = keep.tril()
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            bias = attn_mask.to(cdt)
            keep = keep & ~torch.isneginf(bias)
    shp = torch.broadcast_shapes(q.shape[:-1] + (S,), keep.shape)
    keep = keep.expand(shp).contiguous()
    out = _Attention.apply(q, k, v, bias, keep, sc)
    return out.to(query.dtype)
