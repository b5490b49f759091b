"""Eager gpt-oss-style SDPA: scores plus sink column, one (L, S + 1) causal mask built with tril over the whole
logit matrix, softmax, drop the sink column.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["with is_causal=True the tril mask is built over all S + 1 logit columns, so the sink column (index S) is "
             "hidden from every query row i < S and causal calls lose the sink on those rows"],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout not supported")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H, Hkv = q.shape[-3], k.shape[-3]
    if enable_gqa and Hkv != H:
        k = k.unsqueeze(-3).expand(*k.shape[:-2], H // Hkv, *k.shape[-2:]).flatten(-4, -3)
        v = v.unsqueeze(-3).expand(*v.shape[:-2], H // Hkv, *v.shape[-2:]).flatten(-4, -3)
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    w = torch.matmul(q, k.transpose(-1, -2)) * scale
    if attn_mask is not None:
        w = w.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else w + attn_mask.to(cdt)
    if sinks is not None:
        w = torch.cat([w, sinks.to(cdt).reshape(H, 1, 1).expand(*w.shape[:-1], 1)], dim=-1)
    if is_causal:
        keep = torch.ones(L, w.shape[-1], dtype=torch.bool, device=w.device).tril()
        w = w.masked_fill(~keep, float("-inf"))

    m = w.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(w - m)
    den = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    return torch.matmul(p[..., :S], v).to(query.dtype)
