"""flash_attn_with_kvcache in PyTorch: append new tokens through the block table, gather each sequence's keys, attend.

Only positions < cache_seqlens[b] + seqlen_new are ever gathered, so garbage in unused slots never reaches the math.
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
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = torch.zeros(B, dtype=torch.int32, device=q.device)
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float64 if ct == torch.float64 else torch.float32,
                     device=q.device)
    left, right = window_size
    if causal:
        right = 0
    for b in range(B):
        start = int(cache_seqlens[b])
        if n_new:
            pos = torch.arange(start, start + n_new, device=q.device)
            pages = block_table[b, pos // block_size].long()
            k_cache[pages, pos % block_size] = k[b].to(k_cache.dtype)
            v_cache[pages, pos % block_size] = v[b].to(v_cache.dtype)
        S = start + n_new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pages = block_table[b, pos // block_size].long()
        kb = k_cache[pages, pos % block_size].to(ct).repeat_interleave(H // Hkv, dim=1)    # (S, H, D)
        vb = v_cache[pages, pos % block_size].to(ct).repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("qhd,shd->hqs", q[b].to(ct), kb) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device)[:, None] + (S - Lq)
        j = pos[None, :]
        keep = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
        s = s.masked_fill(~keep, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)                                                 # (H, Lq)
        p = torch.exp(s - torch.where(torch.isinf(row_lse), torch.zeros_like(row_lse), row_lse)[..., None])
        out[b] = torch.einsum("hqs,shd->qhd", p, vb)
        lse[b] = row_lse
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
