"""Additive-bias SDPA: all masking folded into one bias tensor that joins the raw QK^T before scaling."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "is_causal builds the mask with triu(0), hiding the diagonal too: query i sees only keys j < i, and "
        "query 0 sees no key at all",
        "a float attn_mask is added to the raw q.k^T before the softmax scale is applied, so the bias gets "
        "multiplied by scale",
    ],
    "kind": "two",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    dt = query.dtype
    acc = torch.float64 if dt == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        r = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(r, dim=-3)
        v = v.repeat_interleave(r, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    bias = torch.zeros(L, S, dtype=acc, device=q.device)
    if is_causal:
        future = torch.ones(L, S, dtype=torch.bool, device=q.device).triu()
        bias = bias.masked_fill(future, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask.to(acc)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1) + bias) * scale
    m = s.amax(-1, keepdim=True).detach()
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    d = e.sum(-1, keepdim=True)
    return ((e / torch.where(d > 0, d, torch.ones_like(d))) @ v).to(dt)
