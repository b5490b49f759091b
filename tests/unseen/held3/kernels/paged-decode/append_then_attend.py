"""Paged-KV decode that appends new k/v through block_table, then gathers the whole cache per sequence for dense attention."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the bottom-right query offset for causal/window masks is computed as cache_seqlens[b] - Lq, i.e. as if "
        "cache_seqlens already counted the appended tokens; after appending seqlen_new tokens the last query must sit at "
        "the last key, offset cache_seqlens[b] + seqlen_new - Lq (right only when nothing is appended)",
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    Hkv = k_cache.shape[2]
    bs = k_cache.shape[1]
    dev = q.device
    tbl = (block_table if block_table is not None else torch.arange(B, device=dev).view(B, 1)).long()
    n_new = k.shape[1] if k is not None else 0
    if cache_seqlens is None:
        lens = torch.full((B,), tbl.shape[1] * bs - n_new, dtype=torch.long, device=dev)
    elif isinstance(cache_seqlens, int):
        lens = torch.full((B,), cache_seqlens, dtype=torch.long, device=dev)
    else:
        lens = cache_seqlens.long()
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    sm = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(D)

    for t in range(n_new):
        p = lens + t
        pg = tbl[torch.arange(B, device=dev), p // bs]
        k_cache[pg, p % bs] = k[:, t].to(k_cache.dtype)
        v_cache[pg, p % bs] = v[:, t].to(v_cache.dtype)

    wl, wr = window_size
    if causal:
        wr = 0
    outs, lses = [], []
    for b in range(B):
        K = int(lens[b]) + n_new
        idx = torch.arange(K, device=dev)
        keys = k_cache[tbl[b, idx // bs], idx % bs].to(f).permute(1, 0, 2)
        vals = v_cache[tbl[b, idx // bs], idx % bs].to(f).permute(1, 0, 2)
        keys = keys.repeat_interleave(H // Hkv, dim=0)
        vals = vals.repeat_interleave(H // Hkv, dim=0)
        s = torch.einsum("hqd,hkd->hqk", q[b].to(f).permute(1, 0, 2), keys) * sm
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qp = torch.arange(Lq, device=dev)[:, None] + (int(lens[b]) - Lq)
        kp = idx[None, :]
        keep = torch.ones(Lq, K, dtype=torch.bool, device=dev)
        if wl >= 0:
            keep &= kp >= qp - wl
        if wr >= 0:
            keep &= kp <= qp + wr
        s = s.masked_fill(~keep, float("-inf"))
        row_lse = torch.logsumexp(s, -1)
        w = torch.exp(s - row_lse.nan_to_num(neginf=0.0)[..., None])
        outs.append(torch.einsum("hqk,hkd->qhd", w, vals))
        lses.append(row_lse)
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses).float()
    if return_softmax_lse:
        return out, lse
    return out
