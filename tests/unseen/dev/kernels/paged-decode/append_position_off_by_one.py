"""Paged decode with in-place append; cache_seqlens read as the index of the last cached token (vLLM-style
slot mapping), gather-based attention."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "new tokens are written at positions cache_seqlens[b] + 1 .. cache_seqlens[b] + seqlen_new (one slot too "
        "far) and cache_seqlens[b] + seqlen_new + 1 keys are attended, so the garbage slot at position "
        "cache_seqlens[b] is attended and the cache is written one slot off"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    n_new = 0 if k is None else k.shape[1]
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(B):
        last = int(cache_seqlens[b])          # index of the last cached token
        if n_new:
            slots = torch.arange(last + 1, last + 1 + n_new, device=q.device)
            pages = block_table[b].long()[slots // bs]
            k_cache[pages, slots % bs] = k[b].to(k_cache.dtype)
            v_cache[pages, slots % bs] = v[b].to(v_cache.dtype)
            last = last + n_new
        S = last + 1 if (n_new or last > 0) else 0
        if S == 0:
            continue
        idx = torch.arange(S, device=q.device)
        pages = block_table[b].long()[idx // bs]
        kk = k_cache[pages, idx % bs].to(ct).repeat_interleave(H // Hkv, 1)
        vv = v_cache[pages, idx % bs].to(ct).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(ct), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        kj = idx[None, :]
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= kj >= qi - left
        if right >= 0:
            vis &= kj <= qi + right
        s = s.masked_fill(~vis, float("-inf"))
        lb = torch.logsumexp(s, -1)
        w = torch.exp(s - torch.where(torch.isinf(lb), torch.zeros_like(lb), lb)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", w, vv).to(q.dtype)
        lse[b] = lb.float()
    return (out, lse) if return_softmax_lse else out
