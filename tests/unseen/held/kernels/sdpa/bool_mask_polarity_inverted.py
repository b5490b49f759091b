"""Dense SDPA ported from our HF-style attention: boolean masks are applied with masked_fill, float masks are added.

Softmax in float32, result cast back to the query dtype.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a boolean attn_mask is applied with masked_fill(attn_mask, -inf), treating True as 'masked out' instead of "
        "'takes part', so every boolean mask is inverted"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p:
        raise NotImplementedError("dropout_p > 0")
    work = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(work)
    k = key.to(work)
    v = value.to(work)
    if enable_gqa and q.size(-3) != k.size(-3):
        n = q.size(-3) // k.size(-3)
        k = torch.repeat_interleave(k, n, dim=-3)
        v = torch.repeat_interleave(v, n, dim=-3)
    L, S = q.size(-2), k.size(-2)
    scale = scale if scale is not None else q.size(-1) ** -0.5
    logits = torch.matmul(q, k.transpose(-1, -2)).mul(scale)
    if is_causal:
        upper = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1)
        logits = logits.masked_fill(upper, -math.inf)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            # HF convention: the mask marks padding
            logits = logits.masked_fill(attn_mask, -math.inf)
        else:
            logits = logits + attn_mask.to(work)
    mx = logits.amax(-1, keepdim=True).detach()
    mx = torch.where(mx == -math.inf, torch.zeros_like(mx), mx)
    w = torch.exp(logits - mx)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return torch.matmul(w, v).to(query.dtype)
