"""Paged decode with a learnable sink, written as the reference token loop of a decode kernel: walk the sequence's
positions through block_table one key at a time, online softmax seeded with the sink (m = sink, l = 1).
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": ["the running sum l and the output accumulator are kept in q's dtype, so with bfloat16 inputs every "
             "per-key update is rounded to 8 bits and small terms stop counting once l is large; over a few hundred "
             "keys out and lse drift by several percent"],
    "kind": "precision",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    page_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    n_new = 0 if k is None else k.shape[1]
    out = torch.empty(B, Lq, H, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H, Lq, dtype=wide, device=q.device)
    for b in range(B):
        base = int(cache_seqlens[b])
        for t in range(n_new):
            p = base + t
            pg = int(block_table[b, p // page_size])
            k_cache[pg, p % page_size] = k[b, t]
            v_cache[pg, p % page_size] = v[b, t]
        S = base + n_new
        qb = q[b].to(wide).transpose(0, 1)  # H Lq D
        row = torch.arange(Lq, device=q.device) + S - Lq
        if learnable_sink is not None:
            m = learnable_sink.to(wide).view(H, 1).expand(H, Lq).clone()
            l_run = torch.ones(H, Lq, dtype=q.dtype, device=q.device)
        else:
            m = torch.full((H, Lq), float("-inf"), dtype=wide, device=q.device)
            l_run = torch.zeros(H, Lq, dtype=q.dtype, device=q.device)
        acc = torch.zeros(H, Lq, v_cache.shape[-1], dtype=q.dtype, device=q.device)
        for p in range(S):
            pg = int(block_table[b, p // page_size])
            kp = k_cache[pg, p % page_size].to(wide).repeat_interleave(group, 0)  # H D
            vp = v_cache[pg, p % page_size].to(wide).repeat_interleave(group, 0)
            s = (qb @ kp.unsqueeze(-1)).squeeze(-1) * scale  # H Lq
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            ok = torch.ones(Lq, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= p >= row - left
            if right >= 0:
                ok &= p <= row + right
            s = s.masked_fill(~ok, float("-inf"))
            m_new = torch.maximum(m, s)
            m_use = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            w = torch.exp(s - m_use)
            l_run = (l_run * alpha + w).to(q.dtype)
            acc = (acc * alpha.unsqueeze(-1) + w.unsqueeze(-1) * vp.unsqueeze(1)).to(q.dtype)
            m = m_new
        l_w = l_run.to(wide)
        out[b] = (acc.to(wide) / torch.where(l_w == 0, torch.ones_like(l_w), l_w).unsqueeze(-1)).transpose(0, 1)
        lse[b] = m + torch.log(l_w)
    if return_softmax_lse:
        return out, lse
    return out
