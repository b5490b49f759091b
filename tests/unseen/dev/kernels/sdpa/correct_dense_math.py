"""Dense SDPA port: upcast to float32, mask, safe softmax, matmul with V; autograd does the backward."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported by this port")
    out_dtype = query.dtype
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    E = q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale

    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and Hkv != H:
        group = H // Hkv
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    L, S = scores.shape[-2], scores.shape[-1]
    keep = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if is_causal:
        keep = keep.tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            keep = keep & attn_mask
        else:
            scores = scores + attn_mask.to(acc)
    scores = scores.masked_fill(~keep, float("-inf"))

    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    p = torch.exp(scores - row_max)
    denom = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
    out = torch.matmul(p, v)
    return out.to(out_dtype)
