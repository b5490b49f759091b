"""Paged-KV decode: per-token cache append loop followed by a gathered, masked attention per sequence."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the new value rows are written one position late (at cache_seqlens[b] + t + 1 instead of cache_seqlens[b] + t), "
        "so the first new position keeps a stale value, and the slot just past the sequence is clobbered",
        "an explicit softmax_scale argument is ignored; the kernel always uses 1/sqrt(head_dim)",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    tbl = (torch.arange(B, device=dev)[:, None] if block_table is None else block_table).long()
    n_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = tbl.shape[1] * bs - n_new
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, device=dev)
    L0 = cache_seqlens.long()
    w = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D)

    cap = tbl.shape[1] * bs
    for b in range(B):
        for t in range(n_new):
            pk = int(L0[b]) + t
            k_cache[tbl[b, pk // bs], pk % bs] = k[b, t].to(k_cache.dtype)
            pv = min(pk + 1, cap - 1)
            v_cache[tbl[b, pv // bs], pv % bs] = v[b, t].to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=w, device=dev)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=dev)
    for b in range(B):
        K = int(L0[b]) + n_new
        if K == 0:
            continue
        idx = torch.arange(K, device=dev)
        kk = k_cache[tbl[b, idx // bs], idx % bs].to(w).repeat_interleave(H // Hkv, dim=1)
        vv = v_cache[tbl[b, idx // bs], idx % bs].to(w).repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[b].to(w), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=dev)[:, None] + (K - Lq)
        kj = idx[None, :]
        good = torch.ones(Lq, K, dtype=torch.bool, device=dev)
        if left >= 0:
            good &= kj >= qi - left
        if right >= 0:
            good &= kj <= qi + right
        s = s.masked_fill(~good, float("-inf"))
        l = torch.logsumexp(s, -1)
        prob = torch.exp(s - torch.where(torch.isinf(l), torch.zeros_like(l), l)[..., None])
        out[b] = torch.einsum("hqk,khd->qhd", prob, vv)
        lse[b] = l.float()
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
