"""Paged decode, one page per step with an online softmax (PagedAttention v1 style), statistics in float32.

The per-page P @ V product runs in the cache dtype like the CUDA kernel's half-precision dot.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the output accumulator is kept in the cache dtype (acc = acc * alpha + p.to(v_cache.dtype) @ v_page, stored "
        "back in bfloat16/float16), so it is rounded after every page and long sequences end with errors several "
        "times PyTorch's"
    ],
    "kind": "precision",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    st = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=st, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(n_new):
            p = n0 + t
            pg = int(block_table[b, p // bs])
            k_cache[pg, p % bs] = k[b, t]
            v_cache[pg, p % bs] = v[b, t]
        S = n0 + n_new
        qb = q[b].to(st).transpose(0, 1)                              # (H, Lq, D)
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        m = torch.full((H, Lq, 1), -math.inf, dtype=st, device=q.device)
        l_sum = torch.zeros((H, Lq, 1), dtype=st, device=q.device)
        acc = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=v_cache.dtype, device=q.device)
        for blk in range((S + bs - 1) // bs):
            n_valid = min(bs, S - blk * bs)
            pg = int(block_table[b, blk])
            kp = k_cache[pg, :n_valid].repeat_interleave(H // Hkv, 1).transpose(0, 1)   # (H, n, D)
            vp = v_cache[pg, :n_valid].repeat_interleave(H // Hkv, 1).transpose(0, 1)
            kpos = torch.arange(blk * bs, blk * bs + n_valid, device=q.device)[None, :]
            s = qb @ kp.to(st).transpose(1, 2) * scale
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
            l_sum = l_sum * alpha + pr.sum(-1, keepdim=True)
            acc = acc * alpha.to(acc.dtype) + pr.to(vp.dtype) @ vp
            m = m_new
        o = acc.to(st) / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum))
        out[b] = o.transpose(0, 1).to(out.dtype)
        lse[b] = (torch.where(torch.isinf(m), torch.zeros_like(m), m) + torch.log(l_sum)).squeeze(-1)
    return (out, lse) if return_softmax_lse else out
