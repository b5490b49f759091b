"""Gather-free einsum flash_attn_func that keeps everything in the (B, L, H, S) layout of q so no transposes are needed.

Scores, masks and the softmax all live in (B, L, H, S); the output comes straight out in (B, L, H, D).
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "softmax_lse is returned in the (B, L, H) layout the scores were computed in instead of (B, H, L), so the "
        "returned lse is transposed (wrong shape when L != H, silently wrong values when L == H)"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    g = H // Hkv
    qg = q.to(wt).view(B, L, Hkv, g, D)
    s = torch.einsum("blkgd,bskd->blkgs", qg, k.to(wt)).reshape(B, L, H, S) * scale
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(L, device=q.device).view(L, 1, 1) + (S - L)
    kj = torch.arange(S, device=q.device).view(1, 1, S)
    if alibi_slopes is not None:
        sl = alibi_slopes.to(wt)
        sl = sl.view(1, 1, H, 1) if sl.dim() == 1 else sl.view(B, 1, H, 1)
        s = s - sl * (qi - kj).abs()
    left, right = window_size
    if causal:
        right = 0
    vis = torch.ones(L, 1, S, dtype=torch.bool, device=q.device)
    if left >= 0:
        vis = vis & (kj >= qi - left)
    if right >= 0:
        vis = vis & (kj <= qi + right)
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, dim=-1)                       # (B, L, H)
    p = torch.exp(s - lse.nan_to_num(neginf=0.0).unsqueeze(-1))
    out = torch.einsum("blkgs,bskd->blkgd", p.view(B, L, Hkv, g, S), v.to(wt)).reshape(B, L, H, -1)
    out = out.to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
