"""SDPA autograd.Function with a dense forward and a hand-written backward that also returns the float-mask gradient."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the gradient of a float attn_mask that is broadcast over batch/head dims is reduced with mean over those dims "
        "instead of sum, so it comes out divided by the number of broadcast copies (correct only for a full-shape mask)",
        "with enable_gqa the backward folds the expanded dk/dv as (groups, Hkv) instead of (Hkv, groups), i.e. it sums "
        "query heads h with h % Hkv == j into kv head j, while the forward (correctly) maps head h to kv head h // groups",
    ],
    "kind": "two",
}


def _wd(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def _expand(x, groups):
    return x.repeat_interleave(groups, dim=-3) if groups > 1 else x


def _scores(q, k, bias, keep, scale):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _reduce_like(g, like):
    while g.dim() > like.dim():
        g = g.mean(dim=0)
    dims = [i for i in range(like.dim()) if like.size(i) == 1 and g.size(i) != 1]
    if dims:
        g = g.mean(dim=dims, keepdim=True)
    return g


class _DenseAttn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, scale, groups):
        wd = _wd(q.dtype)
        s = _scores(q.to(wd), _expand(k.to(wd), groups), None if bias is None else bias.to(wd), keep, scale)
        mx = s.amax(dim=-1, keepdim=True)
        mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
        e = torch.exp(s - mx)
        z = e.sum(dim=-1, keepdim=True)
        p = e / torch.where(z > 0, z, torch.ones_like(z))
        out = torch.matmul(p, _expand(v.to(wd), groups))
        ctx.save_for_backward(q, k, v, bias, keep, p, out)
        ctx.scale, ctx.groups = scale, groups
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, keep, p, out = ctx.saved_tensors
        scale, groups = ctx.scale, ctx.groups
        wd = p.dtype
        go = grad_out.to(wd)
        kf = _expand(k.to(wd), groups)
        vf = _expand(v.to(wd), groups)
        qf = q.to(wd)
        dv = torch.matmul(p.transpose(-1, -2), go)
        dp = torch.matmul(go, vf.transpose(-1, -2))
        ds = p * (dp - (go * out).sum(dim=-1, keepdim=True))
        dq = torch.matmul(ds, kf) * scale
        dk = torch.matmul(ds.transpose(-1, -2), qf) * scale
        if groups > 1:
            hkv = dk.size(-3) // groups
            dk = dk.unflatten(-3, (groups, hkv)).sum(dim=-4)
            dv = dv.unflatten(-3, (groups, hkv)).sum(dim=-4)
        dbias = None
        if bias is not None and ctx.needs_input_grad[3]:
            dbias = _reduce_like(ds, bias).to(bias.dtype)
        return (dq.sum_to_size(q.shape).to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype),
                dv.sum_to_size(v.shape).to(v.dtype), dbias, None, None, None)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, S = query.size(-2), key.size(-2)
    groups = 1
    if enable_gqa and key.size(-3) != query.size(-3):
        groups = query.size(-3) // key.size(-3)
    keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril() if is_causal else None
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask
    sm = 1.0 / math.sqrt(query.size(-1)) if scale is None else float(scale)
    return _DenseAttn.apply(query, key, value, bias, keep, sm, groups)
