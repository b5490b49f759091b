"""Scaled dot-product attention built from plain differentiable torch ops with a safe softmax."""
import math

import torch

TRUTH = {"api": "sdpa", "bugs": [], "kind": "correct"}


def _work_dtype(dt):
    return torch.float64 if dt == torch.float64 else torch.float32


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    out_dtype = query.dtype
    wd = _work_dtype(out_dtype)
    q, k, v = query.to(wd), key.to(wd), value.to(wd)
    L, S = q.size(-2), k.size(-2)
    sm_scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale

    if enable_gqa and q.dim() >= 3 and k.size(-3) != q.size(-3):
        rep = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)

    scores = torch.matmul(q, k.transpose(-2, -1)) * sm_scale

    keep = None
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = attn_mask if keep is None else keep & attn_mask
        else:
            scores = scores + attn_mask.to(wd)
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))

    row_max = scores.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    e = torch.exp(scores - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    probs = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.matmul(probs, v)
    return out.to(out_dtype)
