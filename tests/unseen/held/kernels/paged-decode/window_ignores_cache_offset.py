"""Sliding-window paged decode (Mistral-style): gather the sequence's keys, mask by window and causality, softmax.

Query positions are measured in the sequence's own coordinates so the window follows the last token.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the sliding-window bounds use the query index i as its position instead of i + S_b - Lq (causal alone is "
        "right), so with a window the queries only see keys near the start of the sequence instead of the last "
        "window_size[0] keys"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    if k is not None:
        n_new = k.shape[1]
        rows = torch.arange(n_new, device=q.device)
        for b in range(B):
            p = int(cache_seqlens[b]) + rows
            pages = block_table[b].long()[p // bs]
            k_cache[pages, p % bs] = k[b]
            v_cache[pages, p % bs] = v[b]
    else:
        n_new = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=ct, device=q.device)
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        if S == 0:
            continue
        p = torch.arange(S, device=q.device)
        pages = block_table[b].long()[p // bs]
        kb = k_cache[pages, p % bs].to(ct).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pages, p % bs].to(ct).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(ct), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None]
        kj = p[None, :]
        allowed = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if causal:
            allowed &= kj <= qi + S - Lq
        if window_size[0] >= 0:
            allowed &= kj >= qi - window_size[0]
        if window_size[1] >= 0:
            allowed &= kj <= qi + window_size[1]
        s = s.masked_fill(~allowed, -math.inf)
        l_ = torch.logsumexp(s, dim=-1)
        w = torch.exp(s - torch.where(torch.isinf(l_), torch.zeros_like(l_), l_)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", w, vb)
        lse[b] = l_
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
