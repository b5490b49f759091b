"""Paged decode with a learnable sink: pages are visited in block_table order with an online softmax whose running
max starts at the sink logit, so the sink is in the softmax from the first page on.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": ["the running max is seeded with the sink (m = sink) but the running sum with 0 instead of exp(sink - m) "
             "= 1, so the sink never enters the denominator: out and lse are those of attention without a sink (rows "
             "that see no key get lse -inf)"],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    P, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    t_new = 0 if k is None else k.shape[1]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt, device=q.device)
    lse = torch.zeros(B, H, Lq, dtype=cdt, device=q.device)
    for b in range(B):
        old = int(cache_seqlens[b])
        for t in range(t_new):
            blk = int(block_table[b, (old + t) // P])
            k_cache[blk, (old + t) % P] = k[b, t]
            v_cache[blk, (old + t) % P] = v[b, t]
        S = old + t_new
        qb = q[b].to(cdt).permute(1, 0, 2)
        diag = torch.arange(Lq, device=q.device).view(-1, 1) + S - Lq
        if learnable_sink is not None:
            m = learnable_sink.to(cdt).view(H, 1).repeat(1, Lq)
        else:
            m = torch.full((H, Lq), float("-inf"), dtype=cdt, device=q.device)
        l_sum = torch.zeros(H, Lq, dtype=cdt, device=q.device)
        acc = torch.zeros(H, Lq, v_cache.shape[-1], dtype=cdt, device=q.device)
        for pi in range((S + P - 1) // P):
            blk = int(block_table[b, pi])
            cnt = min(P, S - pi * P)
            kb = k_cache[blk, :cnt].to(cdt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
            vb = v_cache[blk, :cnt].to(cdt).permute(1, 0, 2).repeat_interleave(H // Hkv, 0)
            s = qb @ kb.transpose(-1, -2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            col = torch.arange(pi * P, pi * P + cnt, device=q.device).view(1, -1)
            vis = torch.ones(Lq, cnt, dtype=torch.bool, device=q.device)
            if left >= 0:
                vis &= col >= diag - left
            if right >= 0:
                vis &= col <= diag + right
            s = s.masked_fill(~vis, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            m_sub = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            r = torch.exp(m - m_sub)
            e = torch.exp(s - m_sub.unsqueeze(-1))
            l_sum = l_sum * r + e.sum(-1)
            acc = acc * r.unsqueeze(-1) + e @ vb
            m = m_new
        out[b] = (acc / torch.where(l_sum == 0, torch.ones_like(l_sum), l_sum).unsqueeze(-1)).permute(1, 0, 2)
        lse[b] = m + torch.log(l_sum)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
