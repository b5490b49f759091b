"""PagedAttention-style decode: walk each sequence's pages in block_table order with a float32 online softmax.

Only the valid slots of the last page are read (the tail past the sequence length is never touched), and the new
tokens are appended in place, slot by slot, before the walk.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [],
    "kind": "correct",
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
            pos = n0 + t
            page = int(block_table[b, pos // bs])
            k_cache[page, pos % bs] = k[b, t]
            v_cache[page, pos % bs] = v[b, t]
        S = n0 + n_new
        qb = q[b].to(st).transpose(0, 1)                                  # (H, Lq, D)
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        m = torch.full((H, Lq, 1), -math.inf, dtype=st, device=q.device)
        den = torch.zeros((H, Lq, 1), dtype=st, device=q.device)
        acc = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=st, device=q.device)
        for blk in range((S + bs - 1) // bs):
            n_valid = min(bs, S - blk * bs)
            page = int(block_table[b, blk])
            kp = k_cache[page, :n_valid].to(st).repeat_interleave(g, 1).transpose(0, 1)   # (H, n, D)
            vp = v_cache[page, :n_valid].to(st).repeat_interleave(g, 1).transpose(0, 1)
            kpos = torch.arange(blk * bs, blk * bs + n_valid, device=q.device)[None, :]
            s = qb @ kp.transpose(1, 2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            keep = torch.ones(Lq, n_valid, dtype=torch.bool, device=q.device)
            if left >= 0:
                keep &= kpos >= qpos - left
            if right >= 0:
                keep &= kpos <= qpos + right
            s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            pr = torch.exp(s - m_use)
            den = den * alpha + pr.sum(-1, keepdim=True)
            acc = acc * alpha + pr @ vp
            m = m_new
        out[b] = (acc / torch.where(den > 0, den, torch.ones_like(den))).transpose(0, 1)
        lse[b] = (torch.where(torch.isinf(m), torch.zeros_like(m), m) + torch.log(den)).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
