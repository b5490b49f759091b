"""Gemma-2 style attention (logit soft-capping) ported from the FlashAttention interface, dense float32 math."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the soft-cap is applied to the raw q.k before the softmax scale (s = softcap * tanh(q.k / softcap) * "
        "scale) instead of to the scaled score, so outputs are wrong whenever softcap > 0"
    ],
    "kind": "semantic",
}


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    rep = H // Hkv
    qt = q.to(ft).transpose(1, 2)
    kt = k.to(ft).transpose(1, 2).repeat_interleave(rep, 1)
    vt = v.to(ft).transpose(1, 2).repeat_interleave(rep, 1)
    raw = qt @ kt.transpose(-2, -1)
    if softcap > 0.0:
        raw = softcap * torch.tanh(raw / softcap)
    s = raw * scale
    ii = torch.arange(L, device=q.device)[:, None]
    jj = torch.arange(S, device=q.device)[None, :]
    off = S - L
    if alibi_slopes is not None:
        a = alibi_slopes.to(ft)
        a = a.unsqueeze(0) if a.dim() == 1 else a
        s = s - a[:, :, None, None] * (ii + off - jj).abs().to(ft)
    left, right = window_size
    right = 0 if causal else right
    allowed = torch.ones(L, S, dtype=torch.bool, device=q.device)
    if right >= 0:
        allowed &= jj <= ii + off + right
    if left >= 0:
        allowed &= jj >= ii + off - left
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0))
    out = (p @ vt).transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse.squeeze(-1), None
    return out
