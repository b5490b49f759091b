"""SDPA with a finite mask fill (finfo.min instead of -inf) so the softmax never sees inf - inf."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "masked scores are filled with finfo.min instead of -inf, so a row that sees no key (fully masked by "
        "attn_mask) returns the uniform average of all values instead of zeros"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError
    orig = query.dtype
    ct = torch.float64 if orig == torch.float64 else torch.float32
    big_neg = torch.finfo(ct).min
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    if enable_gqa and k.size(-3) != q.size(-3):
        n = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(n, dim=-3)
        v = v.repeat_interleave(n, dim=-3)
    scale = scale if scale is not None else 1 / math.sqrt(q.size(-1))
    s = (q * scale) @ k.transpose(-2, -1)
    L, S = s.size(-2), s.size(-1)
    keep = torch.ones(L, S, dtype=torch.bool, device=s.device)
    if is_causal:
        keep = torch.tril(keep)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        keep = keep & attn_mask
    elif attn_mask is not None:
        s = s + attn_mask.to(ct)
    s = s.masked_fill(~keep, big_neg)
    # float masks may carry -inf; clamp them to the same finite floor
    s = s.clamp_min(big_neg)
    p = torch.softmax(s, dim=-1)
    return (p @ v).to(orig)
