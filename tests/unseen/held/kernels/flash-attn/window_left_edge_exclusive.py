"""Tiled flash_attn_func with an online softmax; the sliding window is tested per tile against the key positions.

float32 running max / sum / accumulator, ALiBi and soft-cap per tile, GQA by repeat_interleave.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the left edge of window_size is tested with k_pos > q_pos - left instead of >=, so every query sees one "
        "key fewer on the left than the window allows (the key exactly `left` positions back is dropped)"
    ],
    "kind": "semantic",
}

TILE = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout_p")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    w_left, w_right = window_size
    if causal:
        w_right = 0
    Q = q.to(dt).permute(0, 2, 1, 3)
    K = k.to(dt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, 1)
    V = v.to(dt).permute(0, 2, 1, 3).repeat_interleave(H // Hkv, 1)
    if alibi_slopes is not None:
        slope = alibi_slopes.to(dt).reshape(-1, H)[..., None, None]
    qpos = (torch.arange(L, device=q.device) + S - L).view(-1, 1)

    m = torch.full((B, H, L, 1), -math.inf, dtype=dt, device=q.device)
    den = torch.zeros((B, H, L, 1), dtype=dt, device=q.device)
    o = torch.zeros((B, H, L, V.shape[-1]), dtype=dt, device=q.device)
    for j0 in range(0, S, TILE):
        kpos = torch.arange(j0, min(j0 + TILE, S), device=q.device).view(1, -1)
        s = Q @ K[:, :, j0:j0 + TILE].transpose(-1, -2) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        if alibi_slopes is not None:
            s = s - slope * (qpos - kpos).abs()
        ok = torch.ones_like(qpos - kpos, dtype=torch.bool)
        if w_left >= 0:
            ok = ok & (kpos > qpos - w_left)
        if w_right >= 0:
            ok = ok & (kpos <= qpos + w_right)
        s = torch.where(ok, s, torch.full_like(s, -math.inf))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True)).detach()
        base = m_new.nan_to_num(neginf=0.0)
        corr = torch.exp(m - base)
        p = torch.exp(s - base)
        den = den * corr + p.sum(-1, keepdim=True)
        o = o * corr + p @ V[:, :, j0:j0 + TILE]
        m = m_new
    out = o / den.clamp_min(torch.finfo(dt).tiny)
    out = out.permute(0, 2, 1, 3).to(q.dtype)
    if return_attn_probs:
        lse = (m.nan_to_num(neginf=0.0) + den.log()).squeeze(-1)
        return out, lse, None
    return out
