"""Tiled FlashAttention forward; the output tile lives in the input dtype between key blocks (saves registers on
the GPU), statistics in float32."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the unnormalised output accumulator is rounded to the input dtype after every key block (acc = (acc * "
        "alpha + p @ v).to(q.dtype)), so for bfloat16 long sequences the rounding errors of all blocks add up "
        "and the output error is several times PyTorch's"
    ],
    "kind": "precision",
}

BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    stat_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    rep = H // Hkv
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(rep, 1)
    vh = v.transpose(1, 2).repeat_interleave(rep, 1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(stat_t)
        slopes = (slopes if slopes.dim() == 2 else slopes.expand(B, H))[:, :, None, None]
    qi = torch.arange(L, device=q.device)[:, None] + S - L
    m_i = torch.full((B, H, L, 1), -math.inf, dtype=stat_t, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=stat_t, device=q.device)
    o_i = torch.zeros((B, H, L, D), dtype=q.dtype, device=q.device)
    for n0 in range(0, S, BLOCK_N):
        kj = torch.arange(n0, min(S, n0 + BLOCK_N), device=q.device)[None, :]
        s = (qh.to(stat_t) @ kh[:, :, n0:n0 + BLOCK_N].to(stat_t).transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (qi - kj).abs().to(stat_t)
        ok = torch.ones(L, kj.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kj >= qi - left
        if right >= 0:
            ok &= kj <= qi + right
        s = s.masked_fill(~ok, -math.inf)
        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
        m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_i - m_ref)
        p = torch.exp(s - m_ref)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        o_i = (o_i.to(stat_t) * alpha + p @ vh[:, :, n0:n0 + BLOCK_N].to(stat_t)).to(q.dtype)
        m_i = m_new
    has = l_i > 0
    out = o_i.to(stat_t) / torch.where(has, l_i, torch.ones_like(l_i))
    lse = torch.where(has, m_i + torch.log(l_i), torch.full_like(l_i, -math.inf)).squeeze(-1)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
