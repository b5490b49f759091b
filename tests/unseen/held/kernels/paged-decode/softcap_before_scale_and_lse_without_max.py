"""Decode kernel for Gemma-2 serving: paged gather, logits soft-capped, max-subtracted softmax; returns lse for merging.

Everything runs in float32 on the gathered keys of each sequence.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the soft-cap is applied to the raw dot product q.k and the softmax scale is multiplied in afterwards, "
        "instead of capping the scaled score, so every softcap > 0 output is wrong",
        "softmax_lse is returned as log(sum(exp(s - m))) without adding the row max m back, so the lse is wrong "
        "(by m) for every row",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=ct, device=q.device)
    lo, hi = window_size
    if causal:
        hi = 0
    for b in range(B):
        n0 = int(cache_seqlens[b])
        if n_new:
            pos = torch.arange(n0, n0 + n_new, device=q.device)
            pg = block_table[b, pos // bs].long()
            k_cache[pg, pos % bs] = k[b]
            v_cache[pg, pos % bs] = v[b]
        S = n0 + n_new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b, pos // bs].long()
        kb = k_cache[pg, pos % bs].to(ct).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, pos % bs].to(ct).repeat_interleave(H // Hkv, 1)
        logits = torch.einsum("lhd,shd->hls", q[b].to(ct), kb)
        if softcap > 0:
            logits = softcap * torch.tanh(logits / softcap)
        logits = logits * scale
        i = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        j = pos[None, :]
        keep = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if lo >= 0:
            keep &= j >= i - lo
        if hi >= 0:
            keep &= j <= i + hi
        logits = logits.masked_fill(~keep, -math.inf)
        m = logits.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(logits - m)
        z = e.sum(-1, keepdim=True)
        out[b] = torch.einsum("hls,shd->lhd", e / torch.where(z > 0, z, torch.ones_like(z)), vb)
        lse[b] = torch.log(z).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
