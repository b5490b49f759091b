"""Decode step with append: scatter the new k/v into their pages, then attend the sequence's cached keys.

Gather-based: all positions of a sequence are looked up through block_table in one advanced-indexing call.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "after appending k/v the attention length is still cache_seqlens[b] (the length before the append), so the "
        "seqlen_new freshly written keys are never attended and the causal/window diagonal is shifted by seqlen_new"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    seqlens = cache_seqlens.long()
    if k is not None:
        t = torch.arange(k.shape[1], device=q.device)
        for b in range(B):
            pos = seqlens[b] + t
            pg = block_table[b].long()[pos // bs]
            k_cache[pg, pos % bs] = k[b]
            v_cache[pg, pos % bs] = v[b]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=wt, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=wt, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(B):
        S = int(seqlens[b])
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b].long()[pos // bs]
        kb = k_cache[pg, pos % bs].to(wt).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, pos % bs].to(wt).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(wt), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device)[:, None] + (S - Lq)
        keep = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= pos[None] >= i - left
        if right >= 0:
            keep &= pos[None] <= i + right
        s = s.masked_fill(~keep, -math.inf)
        l_ = torch.logsumexp(s, -1)
        p = torch.exp(s - l_.nan_to_num(neginf=0.0)[..., None])
        out[b] = (p @ vb.transpose(0, 1)).transpose(0, 1)
        lse[b] = l_
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
