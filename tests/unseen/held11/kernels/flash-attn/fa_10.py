TRUTH = {'api': 'flash-attn', 'bugs': [], 'kind': 'correct'}
import math

import torch

BLOCK_N = 48


def kernel(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
           alibi_slopes=None, deterministic=False, return_attn_probs=False):
    B, L, H, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32

    # pack the g query heads sharing a kv head along the row axis: row r -> (head r // L, query r % L)
    qp = q.to(ct).view(B, L, Hkv, g, D).permute(0, 2, 3, 1, 4).reshape(B, Hkv, g * L, D)
    kt = k.to(ct).permute(0, 2, 1, 3)
    vt = v.to(ct).permute(0, 2, 1, 3)
    row_pos = (torch.arange(g * L) % L + (S - L)).view(-1, 1)
    slopes = None
    if alibi_slopes is not None:
        sl = alibi_slopes.to(ct)
        sl = sl.expand(B, H) if sl.dim() == 1 else sl
        slopes = sl.view(B, Hkv, g, 1).repeat_interleave(L, dim=2)

    m_i = torch.full((B, Hkv, g * L, 1), float('-inf'), dtype=ct)
    l_i = torch.zeros_like(m_i)
    acc = torch.zeros(B, Hkv, g * L, D, dtype=ct)
    for n0 in range(0, S, BLOCK_N):
        n1 = min(n0 + BLOCK_N, S)
        col = torch.arange(n0, n1).view(1, -1)
        s = torch.matmul(qp, kt[:, :, n0:n1].transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (row_pos - col).abs().to(ct)
        keep = torch.ones(g * L, n1 - n0, dtype=torch.bool)
        if left >= 0:
            keep &= col >= row_pos - left
        if right >= 0:
            keep &= col <= row_pos + right
        s = s.masked_fill(~keep, float('-inf'))
        m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
        m_sub = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_i - m_sub)
        p = torch.exp(s - m_sub)
        l_i = l_i * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + torch.matmul(p, vt[:, :, n0:n1])
        m_i = m_new

    o = acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i))
    m_fin = torch.where(torch.isneginf(m_i), torch.zeros_like(m_i), m_i)
    lse = (m_fin + torch.log(l_i)).view(B, Hkv, g, L).reshape(B, H, L)
    out = o.view(B, Hkv, g, L, D).permute(0, 3, 1, 2, 4).reshape(B, L, H, D).to(q.dtype)
    if return_attn_probs:
        return out, lse, None
    return out
