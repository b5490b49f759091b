"""FlashAttention-2 forward in PyTorch: loop over key tiles with an online softmax, float32 statistics and accumulator.

Masks (bottom-right causal, sliding window), soft-cap and ALiBi are applied per tile; autograd runs through the loop.
"""

import math

import torch

TRUTH = {
    "api": "flash-attn",
    "bugs": [],
    "kind": "correct",
}

BLOCK_N = 16


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not supported")
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0

    qh = q.transpose(1, 2).to(acc_t)                                   # (B, H, L, D)
    kh = k.transpose(1, 2).to(acc_t).repeat_interleave(H // Hkv, dim=1)
    vh = v.transpose(1, 2).to(acc_t).repeat_interleave(H // Hkv, dim=1)

    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(acc_t)
        slopes = slopes.expand(B, H) if slopes.dim() == 1 else slopes
        slopes = slopes[:, :, None, None]

    q_pos = torch.arange(L, device=q.device)[:, None] + (S - L)          # query positions on the key axis
    m_i = torch.full((B, H, L, 1), -math.inf, dtype=acc_t, device=q.device)
    l_i = torch.zeros((B, H, L, 1), dtype=acc_t, device=q.device)
    acc = torch.zeros((B, H, L, vh.shape[-1]), dtype=acc_t, device=q.device)

    for start in range(0, S, BLOCK_N):
        end = min(start + BLOCK_N, S)
        s = torch.matmul(qh, kh[:, :, start:end].transpose(-1, -2)) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        k_pos = torch.arange(start, end, device=q.device)[None, :]
        if slopes is not None:
            s = s - slopes * (q_pos - k_pos).abs().to(acc_t)
        keep = torch.ones(L, end - start, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= k_pos >= q_pos - left
        if right >= 0:
            keep &= k_pos <= q_pos + right
        s = s.masked_fill(~keep, -math.inf)

        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True)).detach()
        m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_i - m_safe)
        p = torch.exp(s - m_safe)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + torch.matmul(p, vh[:, :, start:end])
        m_i = m_new

    denom = torch.where(l_i > 0, l_i, torch.ones_like(l_i))
    out = (acc / denom).transpose(1, 2).to(q.dtype)
    if not return_attn_probs:
        return out
    m_fin = torch.where(torch.isinf(m_i), torch.zeros_like(m_i), m_i)
    lse = (m_fin + torch.log(l_i)).squeeze(-1)
    return out, lse, None
