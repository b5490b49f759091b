"""Decode-oriented paged attention: gathers each sequence's pages, single-query softmax generalised to Lq rows."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "causal=True is treated as a no-op (correct only for Lq = 1), so with several new queries (Lq > 1, "
        "speculative decoding / chunked prefill) each query also sees the keys of the queries after it"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    # decoding: the newest query is the last token, so causal masking has nothing to hide
    left, right = window_size
    kv_head = torch.arange(H, device=q.device) // (H // Hkv)
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        L0 = int(cache_seqlens[b])
        if new:
            p = torch.arange(L0, L0 + new, device=q.device)
            pg = block_table[b, p // bs].long()
            k_cache[pg, p % bs] = k[b].to(k_cache.dtype)
            v_cache[pg, p % bs] = v[b].to(v_cache.dtype)
        S = L0 + new
        if S == 0:
            continue
        p = torch.arange(S, device=q.device)
        pg = block_table[b, p // bs].long()
        keys = k_cache[pg, p % bs][:, kv_head].to(ft)
        vals = v_cache[pg, p % bs][:, kv_head].to(ft)
        s = torch.einsum("lhd,shd->hls", q[b].to(ft), keys) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= p[None, :] >= qi - left
        if right >= 0:
            vis &= p[None, :] <= qi + right
        s = s.masked_fill(~vis, -math.inf)
        lb = torch.logsumexp(s, -1)
        w = torch.exp(s - torch.nan_to_num(lb, neginf=0.0)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", w, vals).to(q.dtype)
        lse[b] = lb.float()
    return (out, lse) if return_softmax_lse else out
