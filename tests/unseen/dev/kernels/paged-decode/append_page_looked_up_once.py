"""Paged decode: append the new tokens into the sequence's current page, then gather-based dense attention."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the page for the appended tokens is looked up once, from cache_seqlens[b] // block_size, and used for "
        "all seqlen_new tokens, so when the append crosses a page boundary the later tokens are written into the "
        "wrong page (wrapping around its slots) and the next page keeps garbage that is then attended"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        if new:
            page = int(block_table[b, n0 // bs])
            slots = torch.arange(n0, n0 + new, device=q.device) % bs
            k_cache[page, slots] = k[b].to(k_cache.dtype)
            v_cache[page, slots] = v[b].to(v_cache.dtype)
        S = n0 + new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b, pos // bs].long()
        kb = k_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(f), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        kj = pos[None, :]
        ok = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kj >= qi - left
        if right >= 0:
            ok &= kj <= qi + right
        s = s.masked_fill(~ok, -math.inf)
        l_b = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.nan_to_num(l_b, neginf=0.0)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb).to(q.dtype)
        lse[b] = l_b.float()
    return (out, lse) if return_softmax_lse else out
