TRUTH = {'api': 'sdpa', 'bugs': [], 'kind': 'correct'}
import math

import torch

BLOCK_M = 32
BLOCK_N = 64


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    batch = query.shape[:-3]
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3], key.shape[-2]
    Ev = value.shape[-1]
    softmax_scale = scale if scale is not None else 1.0 / math.sqrt(E)
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    g = H // Hkv if enable_gqa else 1
    hk = H // g

    q = query.reshape(-1, hk, g, L, E).to(ct)
    k = key.reshape(-1, hk, 1, S, E).to(ct)
    v = value.reshape(-1, hk, 1, S, Ev).to(ct)
    N = q.shape[0]

    bias = None
    if attn_mask is not None:
        full = attn_mask.expand(*batch, H, L, S).reshape(N, hk, g, L, S)
        if attn_mask.dtype == torch.bool:
            bias = torch.zeros(full.shape, dtype=ct).masked_fill(~full, float('-inf'))
        else:
            bias = full.to(ct)

    out_tiles = []
    for m0 in range(0, L, BLOCK_M):
        m1 = min(m0 + BLOCK_M, L)
        qt = q[..., m0:m1, :]
        row = torch.arange(m0, m1).view(-1, 1)
        m_i = torch.full((N, hk, g, m1 - m0, 1), float('-inf'), dtype=ct)
        l_i = torch.zeros_like(m_i)
        acc = torch.zeros((N, hk, g, m1 - m0, Ev), dtype=ct)
        kv_end = min(S, m1) if is_causal else S
        for n0 in range(0, kv_end, BLOCK_N):
            n1 = min(n0 + BLOCK_N, kv_end)
            s = torch.matmul(qt, k[..., n0:n1, :].transpose(-1, -2)) * softmax_scale
            if bias is not None:
                s = s + bias[..., m0:m1, n0:n1]
            if is_causal:
                col = torch.arange(n0, n1).view(1, -1)
                s = s.masked_fill(col > row, float('-inf'))
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_safe)
            p = torch.exp(s - m_safe)
            l_i = l_i * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.matmul(p, v[..., n0:n1, :])
            m_i = m_new
        out_tiles.append(acc / torch.where(l_i > 0, l_i, torch.ones_like(l_i)))
    out = torch.cat(out_tiles, dim=-2)
    return out.reshape(*batch, H, L, Ev).to(query.dtype)
