"""Block-tiled FlashAttention forward (32-key tiles) with soft-capping and ALiBi in the score epilogue."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the ALiBi bias is added before the soft-cap instead of after it, so with softcap > 0 and alibi_slopes "
        "the bias gets squashed through tanh together with the score"
    ],
    "kind": "semantic",
}

TILE = 32


def _epilogue(s, scale, softcap, slopes, dist):
    s = s * scale
    if slopes is not None:
        s = s - slopes * dist
    if softcap > 0.0:
        s = softcap * torch.tanh(s / softcap)
    return s


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    g = H // Hkv
    qs = q.to(acc).transpose(1, 2)
    ks = k.to(acc).transpose(1, 2).repeat_interleave(g, 1)
    vs = v.to(acc).transpose(1, 2).repeat_interleave(g, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc)
        slopes = (slopes if slopes.dim() == 2 else slopes.expand(B, H))[:, :, None, None]
    diag = (torch.arange(L, device=q.device) + S - L)[:, None]
    m = torch.full((B, H, L, 1), -math.inf, dtype=acc, device=q.device)
    den = torch.zeros((B, H, L, 1), dtype=acc, device=q.device)
    num = torch.zeros((B, H, L, D), dtype=acc, device=q.device)
    for t in range(0, S, TILE):
        kp = torch.arange(t, min(S, t + TILE), device=q.device)[None, :]
        s = _epilogue(qs @ ks[:, :, t:t + TILE].transpose(-1, -2), scale, softcap, slopes,
                      (diag - kp).abs().to(acc))
        ok = torch.ones(L, kp.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            ok = ok & (kp >= diag - left)
        if right >= 0:
            ok = ok & (kp <= diag + right)
        s = s.masked_fill(~ok, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True)).detach()
        ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        scale_old = torch.exp(m - ref)
        p = torch.exp(s - ref)
        den = den * scale_old + p.sum(-1, keepdim=True)
        num = num * scale_old + p @ vs[:, :, t:t + TILE]
        m = m_new
    empty = den == 0
    out = (num / torch.where(empty, torch.ones_like(den), den)).transpose(1, 2).to(q.dtype)
    lse = torch.where(empty, torch.full_like(den, -math.inf), m + torch.log(den)).squeeze(-1)
    if return_attn_probs:
        return out, lse, None
    return out
