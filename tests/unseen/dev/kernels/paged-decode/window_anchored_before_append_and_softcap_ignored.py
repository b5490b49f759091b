"""Sliding-window paged decode (Mistral / Gemma-2 serving path), gather-based, float32 softmax."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the causal/window diagonal is anchored at the cache length before the append (query i sits at "
        "cache_seqlens[b] - Lq + i instead of cache_seqlens[b] + seqlen_new - Lq + i), so with new k/v the "
        "window and causal limits are shifted left by seqlen_new",
        "the softcap argument is ignored",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        cached = int(cache_seqlens[b])
        if new:
            pos = torch.arange(cached, cached + new, device=q.device)
            pg = block_table[b, pos // bs].long()
            k_cache[pg, pos % bs] = k[b].to(k_cache.dtype)
            v_cache[pg, pos % bs] = v[b].to(v_cache.dtype)
        S = cached + new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b, pos // bs].long()
        kb = k_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, pos % bs].to(f).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(f), kb) * scale
        qpos = cached - Lq + torch.arange(Lq, device=q.device)[:, None]
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= pos[None, :] >= qpos - left
        if right >= 0:
            vis &= pos[None, :] <= qpos + right
        s = s.masked_fill(~vis, -math.inf)
        l_b = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(l_b), torch.zeros_like(l_b), l_b)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb).to(q.dtype)
        lse[b] = l_b.float()
    return (out, lse) if return_softmax_lse else out
