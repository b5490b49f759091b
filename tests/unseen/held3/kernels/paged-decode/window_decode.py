"""Paged-KV decode specialised for sliding-window models: keys are gathered through block_table and masked per query."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the left edge of the sliding window is measured from the last key for every query (kpos >= K - 1 - left) "
        "instead of from each query's own bottom-right aligned position (kpos >= i + K - Lq - left); identical for "
        "single-token decode but earlier queries of a multi-token step see too few keys",
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    if block_table is None:
        block_table = torch.arange(B, dtype=torch.int32, device=dev)[:, None]
    bt = block_table.long()
    S_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = bt.shape[1] * bs - S_new
    if not torch.is_tensor(cache_seqlens):
        cache_seqlens = torch.full((B,), int(cache_seqlens), dtype=torch.int32, device=dev)
    cs = cache_seqlens.long()
    dt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    if S_new:
        pos = cs[:, None] + torch.arange(S_new, device=dev)
        blocks = torch.gather(bt, 1, pos // bs)
        k_cache.index_put_((blocks, pos % bs), k.to(k_cache.dtype))
        v_cache.index_put_((blocks, pos % bs), v.to(v_cache.dtype))

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=dt, device=dev)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=dev)
    for b in range(B):
        K = int(cs[b]) + S_new
        if K == 0:
            continue
        kpos = torch.arange(K, device=dev)
        blk = bt[b, kpos // bs]
        keys = k_cache[blk, kpos % bs].to(dt)
        vals = v_cache[blk, kpos % bs].to(dt)
        keys = keys.repeat_interleave(H // Hkv, dim=1)
        vals = vals.repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[b].to(dt), keys) * scale
        if softcap > 0:
            s = torch.tanh(s / softcap) * softcap
        qpos = torch.arange(Lq, device=dev)[:, None] + (K - Lq)
        keep = torch.ones(Lq, K, dtype=torch.bool, device=dev)
        if left >= 0:
            keep &= kpos[None, :] >= (K - 1) - left
        if right >= 0:
            keep &= kpos[None, :] <= qpos + right
        s = s.masked_fill(~keep, float("-inf"))
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        out[b] = torch.einsum("hqk,khd->qhd", e / torch.where(z > 0, z, torch.ones_like(z)), vals)
        lse[b] = (m + torch.log(z)).squeeze(-1).float()
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
