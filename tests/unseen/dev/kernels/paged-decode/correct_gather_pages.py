"""flash_attn_with_kvcache in PyTorch: append the new tokens through the block table, gather each sequence's
keys page by page, dense float32 attention per sequence."""

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
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    if cache_seqlens is None:
        cache_seqlens = torch.zeros(B, dtype=torch.int32, device=q.device)
    n_new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(B):
        start = int(cache_seqlens[b])
        if n_new:
            pos = torch.arange(start, start + n_new, device=q.device)
            pages = block_table[b, pos // block_size].long()
            slots = pos % block_size
            k_cache[pages, slots] = k[b].to(k_cache.dtype)
            v_cache[pages, slots] = v[b].to(v_cache.dtype)
        S = start + n_new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pages = block_table[b, pos // block_size].long()
        kb = k_cache[pages, pos % block_size].to(acc).repeat_interleave(H // Hkv, dim=1)   # S H D
        vb = v_cache[pages, pos % block_size].to(acc).repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("lhd,shd->hls", q[b].to(acc), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        kj = pos[None, :]
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= kj >= qi - left
        if right >= 0:
            vis &= kj <= qi + right
        s = s.masked_fill(~vis, float("-inf"))
        l_b = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isinf(l_b), torch.zeros_like(l_b), l_b)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb).to(q.dtype)
        lse[b] = l_b.float()
    if return_softmax_lse:
        return out, lse
    return out
