"""Online-softmax FlashAttention forward, one pass over 32-key blocks, statistics in float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "a query row that sees no key (causal with L > S, or a window that misses every key) gets NaN output and "
        "NaN lse, because the running max stays -inf and exp(-inf - (-inf)) is computed unguarded"
    ],
    "kind": "semantic",
}

BN = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p != 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    f32 = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lo, hi = window_size
    if causal:
        hi = 0
    Q = q.to(f32).permute(0, 2, 1, 3)
    K = k.to(f32).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    V = v.to(f32).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, dim=1)
    row = torch.arange(L, device=q.device).view(-1, 1) + (S - L)
    slope = None
    if alibi_slopes is not None:
        slope = alibi_slopes.to(f32).reshape(-1, H, 1, 1)
    mx = torch.full((B, H, L, 1), float("-inf"), dtype=f32, device=q.device)
    sm = torch.zeros((B, H, L, 1), dtype=f32, device=q.device)
    o = torch.zeros((B, H, L, V.shape[-1]), dtype=f32, device=q.device)
    for n in range(0, S, BN):
        col = torch.arange(n, min(n + BN, S), device=q.device).view(1, -1)
        x = Q @ K[:, :, n:n + BN].transpose(2, 3) * scale
        if softcap > 0:
            x = softcap * torch.tanh(x / softcap)
        if slope is not None:
            x = x - slope * (row - col).abs().to(f32)
        vis = torch.ones(L, col.shape[1], dtype=torch.bool, device=q.device)
        if lo >= 0:
            vis = vis & (col >= row - lo)
        if hi >= 0:
            vis = vis & (col <= row + hi)
        x = x.masked_fill(~vis, float("-inf"))
        mnew = torch.maximum(mx, x.amax(-1, keepdim=True)).detach()
        p = torch.exp(x - mnew)
        r = torch.exp(mx - mnew)
        sm = sm * r + p.sum(-1, keepdim=True)
        o = o * r + p @ V[:, :, n:n + BN]
        mx = mnew
    out = (o / sm).permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        return out, (mx + torch.log(sm)).squeeze(-1), None
    return out
