"""Batched paged decode: the append is vectorised per sequence (one page lookup), attention gathers pages per sequence.

GQA is handled by tiling the gathered kv heads up to the query head count.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the append looks up one page, block_table[b, cache_seqlens[b] // block_size], for all seqlen_new tokens "
        "and only wraps the slot with % block_size, so new tokens that cross a page boundary are written over the "
        "start of the current page instead of into the next page",
        "GQA tiles the kv heads with .repeat(1, H // Hkv, 1), so query head h reads kv head h % Hkv instead of "
        "h // (H // Hkv)",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    lens = cache_seqlens.long()
    if n_new:
        t = torch.arange(n_new, device=q.device)
        for b in range(B):
            page = block_table[b, lens[b] // bs].long()
            slots = (lens[b] + t) % bs
            k_cache[page, slots] = k[b]
            v_cache[page, slots] = v[b]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=wt, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=wt, device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(B):
        S = int(lens[b]) + n_new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pages = block_table[b].long()[pos // bs]
        kb = k_cache[pages, pos % bs].to(wt).repeat(1, H // Hkv, 1)
        vb = v_cache[pages, pos % bs].to(wt).repeat(1, H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(wt), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= pos >= i - left
        if right >= 0:
            vis &= pos <= i + right
        s = s.masked_fill(~vis, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - row_lse.nan_to_num(neginf=0.0)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb)
        lse[b] = row_lse
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
