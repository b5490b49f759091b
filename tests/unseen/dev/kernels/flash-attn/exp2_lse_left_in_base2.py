"""Triton-tutorial-style FlashAttention forward in PyTorch: log2(e) folded into the scale, exp2 everywhere."""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [
        "the returned softmax_lse is left in base 2 (m2 + log2(l), the kernel's internal exp2 domain) instead of "
        "being converted to the natural log (times ln 2), so softmax_lse is wrong while the output is right"
    ],
    "kind": "semantic",
}

LOG2E = 1.4426950408889634
BLOCK_N = 16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    qk_scale = sm_scale * LOG2E
    left, right = window_size
    if causal:
        right = 0
    heads = torch.arange(H, device=q.device) // (H // Hkv)
    Q = q.to(acc).transpose(1, 2)
    K = k.to(acc)[:, :, heads].transpose(1, 2)
    V = v.to(acc)[:, :, heads].transpose(1, 2)
    if alibi_slopes is not None:
        al = alibi_slopes.to(acc)
        al = (al if al.dim() == 2 else al[None].expand(B, H))[:, :, None, None]
    offs_m = torch.arange(L, device=q.device)[:, None] + S - L

    m_i = torch.full((B, H, L), -math.inf, dtype=acc, device=q.device)
    l_i = torch.zeros((B, H, L), dtype=acc, device=q.device)
    acc_o = torch.zeros((B, H, L, D), dtype=acc, device=q.device)
    for start_n in range(0, S, BLOCK_N):
        offs_n = torch.arange(start_n, min(S, start_n + BLOCK_N), device=q.device)[None, :]
        qk = Q @ K[:, :, start_n:start_n + BLOCK_N].transpose(-1, -2)
        qk = softcap * torch.tanh(qk * sm_scale / softcap) * LOG2E if softcap > 0.0 else qk * qk_scale
        if alibi_slopes is not None:
            qk = qk - al * (offs_m - offs_n).abs().to(acc) * LOG2E
        keep = torch.ones(L, offs_n.shape[1], dtype=torch.bool, device=q.device)
        if left >= 0:
            keep = keep & (offs_n >= offs_m - left)
        if right >= 0:
            keep = keep & (offs_n <= offs_m + right)
        qk = qk.masked_fill(~keep, -math.inf)
        m_ij = torch.maximum(m_i, qk.amax(-1)).detach()
        m_use = torch.where(torch.isinf(m_ij), torch.zeros_like(m_ij), m_ij)
        p = torch.exp2(qk - m_use[..., None])
        alpha = torch.exp2(m_i - m_use)
        l_i = l_i * alpha + p.sum(-1)
        acc_o = acc_o * alpha[..., None] + p @ V[:, :, start_n:start_n + BLOCK_N]
        m_i = m_ij
    safe_l = torch.where(l_i > 0, l_i, torch.ones_like(l_i))
    out = (acc_o / safe_l[..., None]).transpose(1, 2).to(q.dtype)
    if return_attn_probs:
        lse = torch.where(l_i > 0, m_i + torch.log2(safe_l), torch.full_like(l_i, -math.inf))
        return out, lse, None
    return out
