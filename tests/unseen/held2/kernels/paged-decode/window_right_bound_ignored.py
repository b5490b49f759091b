"""Paged KV-cache attention (flash_attn_with_kvcache): append the new k/v through the block table, gather each
sequence's keys into a contiguous tensor and run dense float32 attention per sequence."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        (
            "the window's right bound is never applied (only causal and the left bound are), so with several "
            "queries and window_size[1] >= 0 a query also sees keys further than window_size[1] to its right"
        ),
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    batch, len_q, n_heads, head_dim = q.shape
    n_kv_heads = k_cache.shape[2]
    group = n_heads // n_kv_heads
    page_size = k_cache.shape[1]
    if block_table is None:
        block_table = torch.arange(batch, dtype=torch.int32).unsqueeze(1)
    if cache_seqlens is None:
        cache_seqlens = torch.full((batch,), block_table.shape[1] * page_size, dtype=torch.int32)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32)
    n_new = 0 if k is None else k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    left = window_size[0]

    out = torch.zeros(batch, len_q, n_heads, v_cache.shape[-1], dtype=acc)
    lse = torch.full((batch, n_heads, len_q), -math.inf, dtype=acc)
    for b in range(batch):
        cached = int(cache_seqlens[b])
        pages = block_table[b].long()
        if n_new > 0:
            pos = torch.arange(cached, cached + n_new)
            k_cache[pages[pos // page_size], pos % page_size] = k[b].to(k_cache.dtype)
            v_cache[pages[pos // page_size], pos % page_size] = v[b].to(v_cache.dtype)
        n_keys = cached + n_new
        if n_keys == 0:
            continue
        pos = torch.arange(n_keys)
        kb = k_cache[pages[pos // page_size], pos % page_size].to(acc).transpose(0, 1)
        vb = v_cache[pages[pos // page_size], pos % page_size].to(acc).transpose(0, 1)
        kb = kb.repeat_interleave(group, dim=0)
        vb = vb.repeat_interleave(group, dim=0)
        qb = q[b].to(acc).transpose(0, 1)

        s = torch.matmul(qb, kb.transpose(-1, -2)) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        row = torch.arange(len_q).unsqueeze(1) + (n_keys - len_q)
        col = torch.arange(n_keys).unsqueeze(0)
        keep = torch.ones(len_q, n_keys, dtype=torch.bool)
        if causal:
            keep &= col <= row
        if left >= 0:
            keep &= col >= row - left
        s = s.masked_fill(~keep, -math.inf)

        row_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        safe = torch.where(torch.isinf(row_lse), torch.zeros_like(row_lse), row_lse)
        p = torch.exp(s - safe)
        out[b] = torch.matmul(p, vb).transpose(0, 1)
        lse[b] = row_lse.squeeze(-1)

    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
