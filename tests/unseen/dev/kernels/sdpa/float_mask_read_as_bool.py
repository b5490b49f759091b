"""Fused-mask SDPA: causal and user masks are merged into one keep-mask before a float32 softmax."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a float attn_mask is turned into a boolean keep-mask (mask != 0) instead of being added to the scores: "
        "its additive bias values are ignored and its 0.0 entries (meaning 'no bias') mask the key out"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p > 0")
    dtype = query.dtype
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    L, S = query.shape[-2], key.shape[-2]
    keep = torch.ones(L, S, dtype=torch.bool, device=query.device)
    if is_causal:
        keep = keep.tril()
    if attn_mask is not None:
        keep = keep & attn_mask.to(torch.bool)
    k, v = key, value
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        r = query.shape[-3] // key.shape[-3]
        k = k.repeat_interleave(r, dim=-3)
        v = v.repeat_interleave(r, dim=-3)
    sc = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    s = torch.matmul(query.to(acc), k.to(acc).transpose(-2, -1)) * sc
    s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(-1, keepdim=True).detach().nan_to_num(neginf=0.0)
    p = (s - m).exp()
    den = p.sum(-1, keepdim=True)
    p = p / den.masked_fill(den == 0, 1.0)
    return torch.matmul(p, v.to(acc)).to(dtype)
