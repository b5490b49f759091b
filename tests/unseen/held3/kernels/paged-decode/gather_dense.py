"""Paged-KV decode attention: scatter new k/v into the pages, gather each sequence's keys through block_table, attend densely."""
import math

import torch

TRUTH = {"api": "paged-decode", "bugs": [], "kind": "correct"}


def _normalize(k_cache, cache_seqlens, block_table, B, n_new):
    if block_table is None:
        # contiguous cache: (B, S_max, Hkv, D) is one "page" per sequence
        block_table = torch.arange(B, dtype=torch.int32, device=k_cache.device).view(B, 1)
    page = k_cache.shape[1]
    capacity = block_table.shape[1] * page
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), capacity - n_new, dtype=torch.int32, device=k_cache.device)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, dtype=torch.int32, device=k_cache.device)
    return cache_seqlens.to(torch.long), block_table.to(torch.long), page


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    Hkv = k_cache.shape[2]
    n_new = 0 if k is None else k.shape[1]
    seqlens, table, page = _normalize(k_cache, cache_seqlens, block_table, B, n_new)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    if n_new:
        pos = seqlens.view(B, 1) + torch.arange(n_new, device=q.device).view(1, n_new)
        pages = torch.gather(table, 1, pos // page)
        rows = pos % page
        k_cache[pages, rows] = k.to(k_cache.dtype)
        v_cache[pages, rows] = v.to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=q.device)
    for b in range(B):
        K = int(seqlens[b]) + n_new
        if K == 0:
            continue
        kpos = torch.arange(K, device=q.device)
        phys = table[b, kpos // page]
        kb = k_cache[phys, kpos % page].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
        vb = v_cache[phys, kpos % page].to(ct).transpose(0, 1).repeat_interleave(H // Hkv, dim=0)
        qb = q[b].to(ct).transpose(0, 1)
        s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qpos = torch.arange(Lq, device=q.device).view(Lq, 1) + (K - Lq)
        ok = torch.ones(Lq, K, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= kpos.view(1, K) >= qpos - left
        if right >= 0:
            ok &= kpos.view(1, K) <= qpos + right
        s = s.masked_fill(~ok, float("-inf"))
        l = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - torch.where(torch.isfinite(l), l, torch.zeros_like(l)).unsqueeze(-1))
        out[b] = torch.matmul(p, vb).transpose(0, 1)
        lse[b] = l.float()
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
