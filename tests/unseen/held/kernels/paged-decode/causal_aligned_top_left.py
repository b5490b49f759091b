"""Paged attention for speculative decoding (several query tokens per sequence): gather pages, dense float32 softmax.

Causal masking of the draft tokens uses the usual triangular mask over (query, key) indices.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "causal=True masks with key j <= query index i (top-left), not j <= i + S_b - Lq, so with Lq > 1 the draft "
        "queries see only the first few cached keys instead of everything up to their own position"
    ],
    "kind": "semantic",
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
    for b in range(B):
        base = int(cache_seqlens[b])
        if n_new:
            pos = torch.arange(base, base + n_new, device=q.device)
            pg = block_table[b, pos // bs].long()
            k_cache[pg, pos % bs] = k[b]
            v_cache[pg, pos % bs] = v[b]
        S = base + n_new
        if S == 0:
            continue
        pos = torch.arange(S, device=q.device)
        pg = block_table[b, pos // bs].long()
        kb = k_cache[pg, pos % bs].to(ct).repeat_interleave(H // Hkv, 1)
        vb = v_cache[pg, pos % bs].to(ct).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(ct), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None]
        kj = pos[None, :]
        diag = qi + S - Lq
        hide = torch.zeros(Lq, S, dtype=torch.bool, device=q.device)
        if causal:
            hide |= kj > qi
        if window_size[0] >= 0:
            hide |= kj < diag - window_size[0]
        if window_size[1] >= 0:
            hide |= kj > diag + window_size[1]
        s = s.masked_fill(hide, -math.inf)
        row = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(row), torch.zeros_like(row), row)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", p, vb)
        lse[b] = row
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
