"""SDPA for grouped-query attention: KV heads are broadcast up to the query heads, then a plain softmax."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "with enable_gqa the kv heads are tiled with repeat (query head h reads kv head h % Hkv) instead of "
        "repeat_interleave (h // (H / Hkv)), so query heads read the wrong key/value head"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout not implemented")
    out_dtype = query.dtype
    f = torch.float64 if out_dtype == torch.float64 else torch.float32
    q, k, v = query.to(f), key.to(f), value.to(f)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and Hkv != H:
        groups = H // Hkv
        reps = [1] * k.dim()
        reps[-3] = groups
        k = k.repeat(*reps)
        v = v.repeat(*reps)
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    att = torch.matmul(q, k.transpose(-2, -1)) * sc
    L, S = att.shape[-2:]
    if is_causal:
        att = att.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            att = att.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            att = att + attn_mask.to(f)
    rowmax = att.max(dim=-1, keepdim=True).values.detach()
    rowmax = torch.where(rowmax.isneginf(), torch.zeros_like(rowmax), rowmax)
    p = torch.exp(att - rowmax)
    denom = p.sum(dim=-1, keepdim=True)
    p = p / torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.matmul(p, v).to(out_dtype)
