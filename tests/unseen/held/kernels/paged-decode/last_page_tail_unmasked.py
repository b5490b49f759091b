"""Block-wise paged decode: walk the sequence's pages with an online softmax, one page (block_size keys) at a time.

float32 running max / sum / accumulator; masks are evaluated per page from the key positions.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "every page is processed whole: the garbage slots of the last page (positions >= cache_seqlens[b] + "
        "seqlen_new) are attended unless causal or a right window bound happens to mask them, and even masked they "
        "enter P @ V, so NaN/inf garbage there turns the output into NaN"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    st = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    g = H // Hkv
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=st, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=st, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(n_new):
            p = n0 + t
            k_cache[block_table[b, p // bs], p % bs] = k[b, t]
            v_cache[block_table[b, p // bs], p % bs] = v[b, t]
        S = n0 + n_new
        qb = q[b].to(st).transpose(0, 1)                                  # (H, Lq, D)
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        m = torch.full((H, Lq, 1), -math.inf, dtype=st, device=q.device)
        l_sum = torch.zeros((H, Lq, 1), dtype=st, device=q.device)
        acc = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=st, device=q.device)
        for blk in range((S + bs - 1) // bs):
            page = int(block_table[b, blk])
            kp = k_cache[page].to(st).repeat_interleave(g, 1).transpose(0, 1)   # (H, bs, D)
            vp = v_cache[page].to(st).repeat_interleave(g, 1).transpose(0, 1)
            kpos = torch.arange(blk * bs, blk * bs + bs, device=q.device)[None, :]
            s = qb @ kp.transpose(1, 2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            keep = torch.ones(Lq, bs, dtype=torch.bool, device=q.device)
            if left >= 0:
                keep &= kpos >= qpos - left
            if right >= 0:
                keep &= kpos <= qpos + right
            s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            pr = torch.exp(s - m_use)
            l_sum = l_sum * alpha + pr.sum(-1, keepdim=True)
            acc = acc * alpha + pr @ vp
            m = m_new
        out[b] = (acc / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum))).transpose(0, 1)
        lse[b] = (torch.where(torch.isinf(m), torch.zeros_like(m), m) + torch.log(l_sum)).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
