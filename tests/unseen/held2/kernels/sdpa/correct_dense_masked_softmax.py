"""Dense scaled-dot-product attention: full score matrix in float32/float64, masks built from indices, safe softmax."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    out_dtype = query.dtype
    work = torch.float64 if out_dtype == torch.float64 else torch.float32
    q = query.to(work)
    k = key.to(work)
    v = value.to(work)
    L, E = q.shape[-2], q.shape[-1]
    S = k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(E)

    if enable_gqa and q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale

    allowed = None
    if is_causal:
        qi = torch.arange(L, device=q.device).unsqueeze(1)
        kj = torch.arange(S, device=q.device).unsqueeze(0)
        allowed = kj <= qi
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = attn_mask if allowed is None else (allowed & attn_mask)
        else:
            scores = scores + attn_mask.to(work)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))

    row_max = scores.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    p = torch.exp(scores - row_max)
    denom = p.sum(dim=-1, keepdim=True)
    denom = torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.matmul(p, v) / denom
    return out.to(out_dtype)
