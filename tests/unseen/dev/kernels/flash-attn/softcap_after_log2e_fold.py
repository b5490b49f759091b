"""Triton-tutorial port: fold sm_scale * log2(e) into one multiplier, then soft-cap, ALiBi and exp2 online softmax."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the soft-cap is applied after log2(e) has been folded into the scale, i.e. softcap * tanh(s * log2e / "
        "softcap) instead of log2e * softcap * tanh(s / softcap), so outputs and lse are wrong when softcap > 0"
    ],
    "kind": "semantic",
}

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
BLOCK_N = 32


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qk_scale = sm_scale * LOG2E
    left, right = window_size
    if causal:
        right = 0
    grp = H // Hkv
    Q = q.to(ct).transpose(1, 2)
    K = k.to(ct).transpose(1, 2).repeat_interleave(grp, 1)
    V = v.to(ct).transpose(1, 2).repeat_interleave(grp, 1)
    slopes2 = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        slopes2 = (sl if sl.dim() == 2 else sl.expand(B, H))[:, :, None, None] * LOG2E
    offs_m = torch.arange(L, device=q.device)[:, None] + S - L
    m_i = torch.full((B, H, L, 1), -math.inf, dtype=ct, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=ct, device=q.device)
    acc = torch.zeros((B, H, L, D), dtype=ct, device=q.device)
    for start_n in range(0, S, BLOCK_N):
        offs_n = torch.arange(start_n, min(S, start_n + BLOCK_N), device=q.device)[None, :]
        qk = Q @ K[:, :, start_n:start_n + BLOCK_N].transpose(-1, -2) * qk_scale
        if softcap > 0:
            qk = softcap * torch.tanh(qk / softcap)
        if slopes2 is not None:
            qk = qk - slopes2 * (offs_m - offs_n).abs().to(ct)
        ok = torch.ones(L, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            ok = ok & (offs_n >= offs_m - left)
        if right >= 0:
            ok = ok & (offs_n <= offs_m + right)
        qk = qk.masked_fill(~ok, -math.inf)
        m_ij = torch.maximum(m_i, qk.amax(-1, keepdim=True)).detach()
        m_s = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)
        p = torch.exp2(qk - m_s)
        alpha = torch.exp2(m_i - m_s)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ V[:, :, start_n:start_n + BLOCK_N]
        m_i = m_ij
    nonempty = l_i > 0
    out = acc / torch.where(nonempty, l_i, torch.ones_like(l_i))
    lse = torch.where(nonempty, (m_i + torch.log2(torch.where(nonempty, l_i, torch.ones_like(l_i)))) * LN2,
                      torch.full_like(l_i, -math.inf)).squeeze(-1)
    out = out.transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
