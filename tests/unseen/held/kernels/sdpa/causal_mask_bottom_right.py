"""SDPA with a causal mask shared with our flash path: tril with the diagonal shifted by S - L, float32 softmax.

The same helper serves the decode kernels, where the last query lines up with the last key.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "is_causal builds the mask aligned bottom-right (query i sees keys j <= i + S - L) instead of SDPA's "
        "upper-left alignment (j <= i), so whenever L != S the causal rows see the wrong keys"
    ],
    "kind": "semantic",
}


def _causal_keep(L, S, device):
    # shared helper: last query row aligned with the last key
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(diagonal=S - L)


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p > 0.0:
        raise NotImplementedError("no dropout")
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(rep, dim=-3)
        v = v.repeat_interleave(rep, dim=-3)
    L, S = q.shape[-2], k.shape[-2]
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * sm_scale
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        s = s.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        s = s + attn_mask.to(acc)
    if is_causal:
        s = s.masked_fill(~_causal_keep(L, S, s.device), float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.nan_to_num(m, neginf=0.0).detach()
    e = (s - m).exp()
    z = e.sum(-1, keepdim=True)
    p = e / z.clamp_min(torch.finfo(acc).tiny)
    return (p @ v).to(query.dtype)
