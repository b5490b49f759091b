"""Paged-KV decode with an online softmax that walks each sequence's pages in order (new tokens appended first)."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the append looks up the physical page once, for the first new position (block_table[b, cache_seqlens[b] // "
        "block_size]), and writes every new token into that page at row (pos % block_size); new tokens that cross a page "
        "boundary wrap around and overwrite older keys/values at the start of that page instead of going to the next "
        "page in block_table",
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    nblk, page, Hkv, _ = k_cache.shape
    dev = q.device
    if block_table is None:
        block_table = torch.arange(B, device=dev, dtype=torch.int32).view(B, 1)
    table = block_table.long()
    n_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = table.shape[1] * page - n_new
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=dev)
    cached = cache_seqlens.long()
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5

    if n_new:
        start_page = table.gather(1, (cached // page).view(B, 1))
        rows = (cached.view(B, 1) + torch.arange(n_new, device=dev).view(1, -1)) % page
        k_cache[start_page.expand(B, n_new), rows] = k.to(k_cache.dtype)
        v_cache[start_page.expand(B, n_new), rows] = v.to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    g = H // Hkv
    out = torch.zeros(B, H, Lq, v_cache.shape[-1], dtype=acc_t, device=dev)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=acc_t, device=dev)
    for b in range(B):
        K = int(cached[b]) + n_new
        qb = q[b].to(acc_t).transpose(0, 1)
        qpos = torch.arange(Lq, device=dev).view(-1, 1) + (K - Lq)
        m = torch.full((H, Lq), float("-inf"), dtype=acc_t, device=dev)
        l = torch.zeros((H, Lq), dtype=acc_t, device=dev)
        o = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=acc_t, device=dev)
        for pi in range((K + page - 1) // page):
            n = min(page, K - pi * page)
            phys = int(table[b, pi])
            kt = k_cache[phys, :n].to(acc_t).transpose(0, 1).repeat_interleave(g, dim=0)
            vt = v_cache[phys, :n].to(acc_t).transpose(0, 1).repeat_interleave(g, dim=0)
            kpos = torch.arange(pi * page, pi * page + n, device=dev).view(1, -1)
            s = torch.matmul(qb, kt.transpose(-1, -2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            ok = torch.ones(Lq, n, dtype=torch.bool, device=dev)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            mref = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            a = torch.exp(m - mref)
            p = torch.exp(s - mref.unsqueeze(-1))
            l = a * l + p.sum(-1)
            o = a.unsqueeze(-1) * o + torch.matmul(p, vt)
            m = m_new
        good = l > 0
        out[b] = o / torch.where(good, l, torch.ones_like(l)).unsqueeze(-1)
        lse[b] = torch.where(good, m + torch.log(torch.where(good, l, torch.ones_like(l))), lse[b])
    out = out.transpose(1, 2).to(q.dtype)
    return (out, lse.float()) if return_softmax_lse else out
