"""Varlen local attention (Mistral-style sliding window) as a per-sequence loop with dense float32 math."""

import math

import torch

TRUTH = {
    "api": "flash-attn-varlen",
    "bugs": [
        "window_size is unpacked as (right, left) instead of (left, right), so an asymmetric window opens on "
        "the wrong side of the diagonal (e.g. (4, 2) shows 2 keys to the left and 4 to the right)"
    ],
    "kind": "semantic",
}


def _seq_attention(qs, ks, vs, scale, causal, window, softcap, slopes):
    L, H, D = qs.shape
    S, Hkv = ks.shape[:2]
    ft = torch.float64 if qs.dtype == torch.float64 else torch.float32
    kx = ks.to(ft)[:, torch.arange(H, device=qs.device) // (H // Hkv)]
    vx = vs.to(ft)[:, torch.arange(H, device=qs.device) // (H // Hkv)]
    s = torch.einsum("lhd,shd->hls", qs.to(ft), kx) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(L, device=qs.device)[:, None] + S - L
    kj = torch.arange(S, device=qs.device)[None, :]
    if slopes is not None:
        s = s - slopes.to(ft)[:, None, None] * (qi - kj).abs().to(ft)
    right, left = window
    if causal:
        right = 0
    m = torch.ones(L, S, dtype=torch.bool, device=qs.device)
    if left >= 0:
        m = m & (kj >= qi - left)
    if right >= 0:
        m = m & (kj <= qi + right)
    s = s.masked_fill(~m, float("-inf"))
    lse = torch.logsumexp(s, -1)
    w = torch.exp(s - torch.nan_to_num(lse, neginf=0.0)[..., None])
    return torch.einsum("hls,shd->lhd", w, vx), lse


def kernel(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
           return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    total_q, H, D = q.shape
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lt = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros_like(q)
    lse = torch.full((H, total_q), float("-inf"), dtype=lt, device=q.device)
    bounds_q = cu_seqlens_q.tolist()
    bounds_k = cu_seqlens_k.tolist()
    for b, (q0, q1, k0, k1) in enumerate(zip(bounds_q[:-1], bounds_q[1:], bounds_k[:-1], bounds_k[1:], strict=True)):
        if q1 <= q0:
            continue
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
        o, lse_b = _seq_attention(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal, tuple(window_size), softcap, slopes)
        out[q0:q1] = o.to(q.dtype)
        lse[:, q0:q1] = lse_b.to(lt)
    if return_attn_probs:
        return out, lse, None
    return out
