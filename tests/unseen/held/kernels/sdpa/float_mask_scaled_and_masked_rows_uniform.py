"""SDPA ported from an older BERT codebase: add the mask to the raw logits, then scale, then softmax in float32.

Masked positions are filled with the dtype's most negative finite value to keep the softmax NaN-free.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a float attn_mask is added to q @ k^T before the scale is applied, so the additive bias is multiplied by "
        "scale instead of being added to the scaled scores",
        "masked positions are filled with torch.finfo(dtype).min instead of -inf, so a row that sees no key gets a "
        "uniform softmax over all keys (the mean of v) instead of zeros",
    ],
    "kind": "two",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout")
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    neg = torch.finfo(ct).min
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    if enable_gqa:
        r = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(r, dim=-3), v.repeat_interleave(r, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    logits = q @ k.transpose(-1, -2)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        logits = logits.masked_fill(~attn_mask, neg)
    elif attn_mask is not None:
        logits = logits + attn_mask.to(ct)
    if is_causal:
        logits = logits.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1), neg)
    logits = logits * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    probs = torch.softmax(logits, dim=-1)
    return (probs @ v).to(query.dtype)
