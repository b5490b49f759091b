"""Paged KV-cache attention with in-place append; vectorised slot mapping over the batch, then a per-sequence
dense softmax."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the appended values are copied from k instead of v (v_cache[...] = k), so the cache is left with keys "
        "in the new value slots and the output attends those",
        "the window's left bound is exclusive (keys j > i + S - Lq - left), one key too few on the left",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lens = cache_seqlens.long()
    new = 0 if k is None else k.shape[1]
    if new:
        pos = lens[:, None] + torch.arange(new, device=q.device)[None, :]            # B new
        pages = torch.gather(block_table.long(), 1, pos // bs)
        slots = pos % bs
        k_cache[pages, slots] = k.to(k_cache.dtype)
        v_cache[pages, slots] = k.to(v_cache.dtype)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        S = int(lens[b]) + new
        if S == 0:
            continue
        idx = torch.arange(S, device=q.device)
        pg = block_table[b].long()[idx // bs]
        kb = k_cache[pg, idx % bs].to(ct).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, idx % bs].to(ct).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(ct), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        rel = idx[None, :] - (torch.arange(Lq, device=q.device)[:, None] + S - Lq)
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= rel > -left
        if right >= 0:
            vis &= rel <= right
        s = s.masked_fill(~vis, -math.inf)
        l_b = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(l_b), torch.zeros_like(l_b), l_b)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb).to(q.dtype)
        lse[b] = l_b.float()
    return (out, lse) if return_softmax_lse else out
