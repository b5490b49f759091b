"""Dense flash_attn_func: float32 scores, torch.softmax for the probabilities, logsumexp for the returned statistics.

Masks are bottom-right aligned; ALiBi after the soft-cap; GQA through a grouped view of q.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "softmax_lse is cast to q's dtype before it is returned (lse.to(q.dtype)), so for bfloat16/float16 inputs "
        "the returned lse is rounded to 8/11 bits (errors of ~0.01-0.03 in bfloat16) instead of being float32"
    ],
    "kind": "precision",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qg = q.to(ft).reshape(B, L, Hkv, g, D).permute(0, 2, 3, 1, 4)     # (B, Hkv, g, L, D)
    kf = k.to(ft).permute(0, 2, 1, 3).unsqueeze(2)                       # (B, Hkv, 1, S, D)
    vf = v.to(ft).permute(0, 2, 1, 3).unsqueeze(2)
    s = (qg @ kf.transpose(-1, -2)) * scale                               # (B, Hkv, g, L, S)
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L, device=q.device)[:, None] + S - L
    j = torch.arange(S, device=q.device)[None, :]
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ft).reshape(-1, Hkv, g, 1, 1)
        s = s - sl * (i - j).abs()
    left, right = window_size
    if causal:
        right = 0
    hide = torch.zeros(L, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        hide |= j < i - left
    if right >= 0:
        hide |= j > i + right
    s = s.masked_fill(hide, -math.inf)
    any_key = (~hide).any(-1)[:, None]
    p = torch.where(any_key, torch.softmax(s, dim=-1), torch.zeros_like(s))
    out = (p @ vf).permute(0, 3, 1, 2, 4).reshape(B, L, H, -1).to(q.dtype)
    if not return_attn_probs:
        return out
    lse = torch.logsumexp(s, dim=-1).reshape(B, H, L)
    return out, lse.to(q.dtype), None
