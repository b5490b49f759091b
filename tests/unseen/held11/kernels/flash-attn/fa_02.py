TRUTH = {'api': 'flash-attn', 'bugs': ['the first key tile a query tile visits is computed with a ceiling division (lo + BLOCK_N - 1) // BLOCK_N of its lowest in-window key position instead of a floor, so the key tile containing the left window edge is skipped whenever that edge is not tile aligned; rows then lose their leftmost window keys (window32_16_gqa, window20_causal_L<S, causal_window30_10); unbounded-left cases are fine'], 'kind': 'semantic'}
import math

import torch

BLOCK_M = 64
BLOCK_N = 64


def _kv_range(m0, m1, L, S, left, right):
    off = S - L
    lo, hi = 0, S
    if left >= 0:
        lo = max(0, m0 + off - left)
    if right >= 0:
        hi = min(S, m1 - 1 + off + right + 1)
    return (lo + BLOCK_N - 1) // BLOCK_N * BLOCK_N, hi


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32

    qh = q.to(ct).transpose(1, 2)
    kh = k.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    vh = v.to(ct).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
    slopes = None
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(ct).view(-1, H, 1, 1)

    outs, lses = [], []
    for m0 in range(0, L, BLOCK_M):
        m1 = min(m0 + BLOCK_M, L)
        qpos = torch.arange(m0, m1).view(-1, 1) + (S - L)
        m_i = torch.full((B, H, m1 - m0, 1), float('-inf'), dtype=ct)
        l_i = torch.zeros_like(m_i)
        acc = torch.zeros(B, H, m1 - m0, D, dtype=ct)
        lo, hi = _kv_range(m0, m1, L, S, left, right)
        for n0 in range(lo, hi, BLOCK_N):
            n1 = min(n0 + BLOCK_N, hi)
            kpos = torch.arange(n0, n1).view(1, -1)
            s = torch.matmul(qh[:, :, m0:m1], kh[:, :, n0:n1].transpose(-1, -2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            if slopes is not None:
                s = s - slopes * (qpos - kpos).abs()
            keep = torch.ones(m1 - m0, n1 - n0, dtype=torch.bool)
            if left >= 0:
                keep &= kpos >= qpos - left
            if right >= 0:
                keep &= kpos <= qpos + right
            s = s.masked_fill(~keep, float('-inf'))
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
            m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_use)
            p = torch.exp(s - m_use)
            l_i = l_i * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, vh[:, :, n0:n1])
            m_i = m_new
        outs.append(acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
        m_fin = torch.where(torch.isneginf(m_i), torch.zeros_like(m_i), m_i)
        lses.append((m_fin + torch.log(l_i)).squeeze(-1))
    out = torch.cat(outs, dim=2).transpose(1, 2).to(q.dtype)
    lse = torch.cat(lses, dim=-1)
    if return_attn_probs:
        return out, lse, None
    return out
