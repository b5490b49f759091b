"""Two-pass SDPA: pass 1 writes the row log-sum-exp into an lse buffer, pass 2 forms P = exp(s - lse) and P @ V.

Scores are computed in float32 in both passes; the lse buffer is allocated like the other activations.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "the lse buffer is allocated in the query dtype, so in bfloat16/float16 the log-sum-exp is rounded before "
        "pass 2 computes exp(s - lse), scaling every row's weights by a rounding factor (up to ~1% in bfloat16)"
    ],
    "kind": "precision",
}


def _scores(q, k, attn_mask, is_causal, scale):
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
    L, S = s.shape[-2:]
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        s = s.masked_fill(~attn_mask, -math.inf)
    elif attn_mask is not None:
        s = s + attn_mask.to(s.dtype)
    return s


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout_p > 0 is not supported")
    k, v = key, value
    if enable_gqa and query.shape[-3] != key.shape[-3]:
        g = query.shape[-3] // key.shape[-3]
        k, v = k.repeat_interleave(g, -3), v.repeat_interleave(g, -3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale

    # pass 1: statistics
    s = _scores(query, k, attn_mask, is_causal, scale)
    lse = torch.empty(s.shape[:-1] + (1,), dtype=query.dtype, device=query.device)
    stat = torch.logsumexp(s, dim=-1, keepdim=True)
    lse.copy_(torch.where(torch.isfinite(stat), stat, torch.full_like(stat, math.inf)))

    # pass 2: normalised probabilities
    s = _scores(query, k, attn_mask, is_causal, scale)
    p = torch.exp(s - lse.to(s.dtype))
    return torch.matmul(p, v.to(p.dtype)).to(query.dtype)
