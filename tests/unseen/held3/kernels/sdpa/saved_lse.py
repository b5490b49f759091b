"""SDPA as an autograd.Function that saves only the log-sum-exp and recomputes probabilities in backward."""
import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the row log-sum-exp saved for backward is stored as bfloat16 (also for float32 inputs), so the recomputed "
        "P = exp(S - lse) in backward is off by a per-row factor of up to ~1-2% and dq/dk/dv lose accuracy; lse must be "
        "kept in float32 (or the input's float64)",
    ],
    "kind": "precision",
}


_LSE_SAVE = torch.bfloat16


def _mask_scores(s, keep, bias):
    if bias is not None:
        s = s + bias
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    return s


class _Attn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, keep, scale, groups):
        f = torch.float64 if q.dtype == torch.float64 else torch.float32
        kf = k.to(f).repeat_interleave(groups, dim=-3) if groups > 1 else k.to(f)
        vf = v.to(f).repeat_interleave(groups, dim=-3) if groups > 1 else v.to(f)
        s = _mask_scores(torch.matmul(q.to(f), kf.transpose(-1, -2)) * scale,
                         keep, None if bias is None else bias.to(f))
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(s - lse_safe)
        out = torch.matmul(p, vf)
        lse_store = torch.float64 if q.dtype == torch.float64 else _LSE_SAVE
        ctx.save_for_backward(q, k, v, bias, keep, out.to(q.dtype), lse.to(lse_store))
        ctx.scale, ctx.groups = scale, groups
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, g):
        q, k, v, bias, keep, out, lse = ctx.saved_tensors
        scale, groups = ctx.scale, ctx.groups
        f = torch.float64 if q.dtype == torch.float64 else torch.float32
        qf = q.to(f)
        kf = k.to(f).repeat_interleave(groups, dim=-3) if groups > 1 else k.to(f)
        vf = v.to(f).repeat_interleave(groups, dim=-3) if groups > 1 else v.to(f)
        g = g.to(f)
        s = _mask_scores(torch.matmul(qf, kf.transpose(-1, -2)) * scale,
                         keep, None if bias is None else bias.to(f))
        lse = lse.to(f)
        p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)))
        dv = torch.matmul(p.transpose(-1, -2), g)
        dp = torch.matmul(g, vf.transpose(-1, -2))
        delta = (g * out.to(f)).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta)
        dq = torch.matmul(ds, kf) * scale
        dk = torch.matmul(ds.transpose(-1, -2), qf) * scale
        if groups > 1:
            dk = dk.unflatten(-3, (dk.size(-3) // groups, groups)).sum(-3)
            dv = dv.unflatten(-3, (dv.size(-3) // groups, groups)).sum(-3)
        dbias = None
        if bias is not None and ctx.needs_input_grad[3]:
            dbias = ds.sum_to_size(bias.shape).to(bias.dtype)
        return (dq.sum_to_size(q.shape).to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype),
                dv.sum_to_size(v.shape).to(v.dtype), dbias, None, None, None)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, S = query.size(-2), key.size(-2)
    groups = query.size(-3) // key.size(-3) if enable_gqa and key.size(-3) != query.size(-3) else 1
    keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril() if is_causal else None
    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            bias = attn_mask
    sm = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    return _Attn.apply(query, key, value, bias, keep, sm, groups)
