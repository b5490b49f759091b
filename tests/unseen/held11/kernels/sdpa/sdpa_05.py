TRUTH = {'api': 'sdpa', 'bugs': ['with is_causal the number of key tiles visited by a query tile is min(q_hi, S) // BLOCK_N (floor) instead of a ceiling division, so the last, partially needed key tile is skipped: rows near the end of each query tile lose their diagonal keys (rows with no visited key come out as zeros) whenever min(q_hi, S) is not a multiple of BLOCK_N (causal cases with L or S not a multiple of 16: causal_eq, causal_L<S, causal_L>S, gqa_6_2_causal, float_mask_causal_11LS; not bool_causal_L!=S, whose tile ends are multiples of 16)'], 'kind': 'semantic'}
import math

import torch

BLOCK_M = 64
BLOCK_N = 16


def _attend_tile(q, k, v, bias, scale, q_lo, q_hi, n_kv, S):
    m = torch.full(q.shape[:-2] + (q_hi - q_lo, 1), float('-inf'), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros(q.shape[:-2] + (q_hi - q_lo, v.shape[-1]), dtype=q.dtype)
    rows = torch.arange(q_lo, q_hi).view(-1, 1)
    for t in range(n_kv):
        k_lo, k_hi = t * BLOCK_N, min((t + 1) * BLOCK_N, S)
        s = torch.matmul(q[..., q_lo:q_hi, :], k[..., k_lo:k_hi, :].transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias[..., q_lo:q_hi, k_lo:k_hi]
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        corr = torch.exp(m - m_use)
        p = torch.exp(s - m_use)
        l = l * corr + p.sum(-1, keepdim=True)
        o = o * corr + torch.matmul(p, v[..., k_lo:k_hi, :])
        m = m_new
    return o / torch.where(l > 0, l, torch.ones_like(l))


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    H, L, E = query.shape[-3:]
    Hkv, S = key.shape[-3:-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    dt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(dt), key.to(dt), value.to(dt)
    if enable_gqa and H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=-3)
        v = v.repeat_interleave(H // Hkv, dim=-3)

    bias = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = torch.zeros(attn_mask.shape, dtype=dt).masked_fill(~attn_mask, float('-inf'))
        else:
            bias = attn_mask.to(dt)
    if is_causal:
        causal = torch.zeros(L, S, dtype=dt).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float('-inf'))
        bias = causal if bias is None else bias + causal

    tiles = []
    for q_lo in range(0, L, BLOCK_M):
        q_hi = min(q_lo + BLOCK_M, L)
        if is_causal:
            n_kv = min(q_hi, S) // BLOCK_N
        else:
            n_kv = (S + BLOCK_N - 1) // BLOCK_N
        tiles.append(_attend_tile(q, k, v, bias, scale, q_lo, q_hi, n_kv, S))
    return torch.cat(tiles, dim=-2).to(query.dtype)
