"""SDPA written the FlashAttention-2 way: one causal diagonal anchored at the last key, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "is_causal aligns the diagonal bottom-right (query i sees keys j <= i + S - L) instead of upper-left "
        "(j <= i), so every row sees the wrong keys whenever L != S"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    dtype = query.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = query.to(work), key.to(work), value.to(work)
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    if enable_gqa and q.size(-3) != k.size(-3):
        rep = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(rep, -3)
        v = v.repeat_interleave(rep, -3)

    s = q @ k.transpose(-1, -2) * scale
    L, S = s.shape[-2:]
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask.to(work)
    if is_causal:
        # FA2 convention: the last query lines up with the last key
        allowed = torch.ones(L, S, dtype=torch.bool, device=s.device).tril(S - L)
        s = s.masked_fill(~allowed, float("-inf"))

    m = s.amax(-1, keepdim=True).detach()
    m = m.masked_fill(m == float("-inf"), 0.0)
    e = (s - m).exp()
    z = e.sum(-1, keepdim=True)
    p = e / z.clamp_min(torch.finfo(work).tiny)
    return (p @ v).to(dtype)
