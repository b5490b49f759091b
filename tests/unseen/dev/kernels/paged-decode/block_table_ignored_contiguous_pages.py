"""Decode attention over a paged KV cache laid out as max_blocks consecutive pages per sequence (the allocator's
common case), vectorised over the batch."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "block_table is never read: sequence b's position p is taken from page b * max_blocks + p // block_size, "
        "so any cache whose pages are not laid out contiguously per sequence is read and written at the wrong "
        "pages"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    num_blocks, bs, Hkv, _ = k_cache.shape
    max_blocks = block_table.shape[1]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    lens = cache_seqlens.long()
    new = 0 if k is None else k.shape[1]
    if new:
        pos = lens[:, None] + torch.arange(new, device=q.device)[None, :]            # B, new
        page = torch.arange(B, device=q.device)[:, None] * max_blocks + pos // bs
        k_cache[page, pos % bs] = k.to(k_cache.dtype)
        v_cache[page, pos % bs] = v.to(v_cache.dtype)
    total = lens + new
    S = int(total.max()) if B else 0
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    if S == 0:
        return (out, lse) if return_softmax_lse else out
    pos = torch.arange(S, device=q.device)
    page = (torch.arange(B, device=q.device)[:, None] * max_blocks + pos[None, :] // bs).clamp_max(num_blocks - 1)
    kb = k_cache[page, pos[None, :] % bs].to(f)          # B S Hkv D
    vb = v_cache[page, pos[None, :] % bs].to(f)
    kb = kb.repeat_interleave(H // Hkv, 2)
    vb = vb.repeat_interleave(H // Hkv, 2)
    s = torch.einsum("blhd,bshd->bhls", q.to(f), kb) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qi = torch.arange(Lq, device=q.device)[None, :, None] + (total[:, None, None] - Lq)
    kj = pos[None, None, :]
    vis = kj < total[:, None, None]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        vis = vis & (kj >= qi - left)
    if right >= 0:
        vis = vis & (kj <= qi + right)
    s = s.masked_fill(~vis[:, None], -math.inf)
    l_all = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(l_all), torch.zeros_like(l_all), l_all)[..., None])
    out = torch.einsum("bhls,bshd->blhd", p, vb).to(q.dtype)
    lse = l_all.float()
    return (out, lse) if return_softmax_lse else out
