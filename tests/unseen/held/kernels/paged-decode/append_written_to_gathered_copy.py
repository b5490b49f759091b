"""Paged decode that materialises each sequence's pages as a contiguous (n_pages * block_size, Hkv, D) tensor.

The new tokens are written into that per-sequence view of the pages, then attention runs on it.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the new k/v are written into k_cache[block_table[b, :n_pages]] — an advanced-indexing copy of the pages, "
        "not a view — so the output is right but the cache itself is never updated (the appended tokens are lost "
        "for the next step)"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ft, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=ft, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        if S == 0:
            continue
        n_pages = (S + bs - 1) // bs
        pages = block_table[b, :n_pages].long()
        kseq = k_cache[pages].reshape(n_pages * bs, Hkv, -1)
        vseq = v_cache[pages].reshape(n_pages * bs, Hkv, -1)
        if n_new:
            kseq[S - n_new:S] = k[b]
            vseq[S - n_new:S] = v[b]
        kb = kseq[:S].to(ft).repeat_interleave(H // Hkv, 1).transpose(0, 1)    # (H, S, D)
        vb = vseq[:S].to(ft).repeat_interleave(H // Hkv, 1).transpose(0, 1)
        s = q[b].to(ft).transpose(0, 1) @ kb.transpose(1, 2) * scale          # (H, Lq, S)
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        j = torch.arange(S, device=q.device)[None, :]
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= j >= i - left
        if right >= 0:
            vis &= j <= i + right
        s = s.masked_fill(~vis, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        out[b] = (e @ vb / torch.where(z > 0, z, torch.ones_like(z))).transpose(0, 1)
        lse[b] = (m + torch.log(z)).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
