"""Eager SDPA with gpt-oss sinks: each head's sink logit is appended as one more score column, softmaxed, then dropped.

Computes in float32 (float64 for float64 inputs) and lets autograd produce the gradients of query, key, value and
sinks.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [],
    "kind": "correct",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported by this kernel")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    num_heads, num_kv = q.shape[-3], k.shape[-3]
    if enable_gqa and num_heads != num_kv:
        group = num_heads // num_kv
        k = k.repeat_interleave(group, dim=-3)
        v = v.repeat_interleave(group, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(cdt)

    if sinks is not None:
        sink_col = sinks.to(cdt).reshape(num_heads, 1, 1).expand(*scores.shape[:-1], 1)
    else:
        sink_col = scores.new_full((*scores.shape[:-1], 1), float("-inf"))
    combined = torch.cat([scores, sink_col], dim=-1)
    row_max = combined.amax(dim=-1, keepdim=True).detach()
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(combined - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    denom = torch.where(denom == 0, torch.ones_like(denom), denom)
    probs = (e / denom)[..., :-1]
    out = torch.matmul(probs, v)
    return out.to(query.dtype)
