"""Paged decode with a flat view of the cache: logical position -> flat slot index, one index_select per sequence.

The cache is viewed as (num_blocks * block_size, Hkv, D) so appends and gathers are plain 1-D index operations.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the flat slot of position p of sequence b is computed as (b * max_blocks + p // block_size) * block_size + "
        "p % block_size, i.e. pages are assumed to be laid out in order per sequence, instead of going through "
        "block_table[b, p // block_size]; appends and reads hit the wrong pages for any non-trivial block_table"
    ],
    "kind": "semantic",
}


def _flat_slots(b, positions, block_size, max_blocks):
    page = b * max_blocks + positions // block_size
    return page * block_size + positions % block_size


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    nblk, bs, Hkv, _ = k_cache.shape
    max_blocks = block_table.shape[1]
    ft = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    kflat = k_cache.view(nblk * bs, Hkv, -1)
    vflat = v_cache.view(nblk * bs, Hkv, -1)
    n_new = 0 if k is None else k.shape[1]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ft, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=ft, device=q.device)
    lo, hi = window_size
    if causal:
        hi = 0
    for b in range(B):
        n0 = int(cache_seqlens[b])
        if n_new:
            slots = _flat_slots(b, torch.arange(n0, n0 + n_new, device=q.device), bs, max_blocks)
            kflat.index_copy_(0, slots, k[b].to(kflat.dtype))
            vflat.index_copy_(0, slots, v[b].to(vflat.dtype))
        S = n0 + n_new
        if S == 0:
            continue
        slots = _flat_slots(b, torch.arange(S, device=q.device), bs, max_blocks)
        kb = kflat.index_select(0, slots).to(ft).repeat_interleave(H // Hkv, 1)
        vb = vflat.index_select(0, slots).to(ft).repeat_interleave(H // Hkv, 1).transpose(0, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(ft), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        j = torch.arange(S, device=q.device)[None, :]
        vis = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if lo >= 0:
            vis &= j >= i - lo
        if hi >= 0:
            vis &= j <= i + hi
        s = s.masked_fill(~vis, -math.inf)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
        e = torch.exp(s - m)
        z = e.sum(-1, keepdim=True)
        out[b] = ((e @ vb) / torch.where(z > 0, z, torch.ones_like(z))).transpose(0, 1)
        lse[b] = (m + torch.log(z)).squeeze(-1)
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
