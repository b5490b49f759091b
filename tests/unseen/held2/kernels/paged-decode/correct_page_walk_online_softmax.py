"""Paged KV-cache attention (flash_attn_with_kvcache) that walks each sequence's pages in block-table order with an
online softmax (running max, sum and float32 accumulator), masking slots past the sequence length."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [],
    "kind": "correct",
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
    left, right = window_size
    if causal:
        right = 0

    out = torch.zeros(batch, len_q, n_heads, v_cache.shape[-1], dtype=q.dtype)
    lse = torch.full((batch, n_heads, len_q), -math.inf, dtype=acc)
    for b in range(batch):
        cached = int(cache_seqlens[b])
        for t in range(n_new):
            slot = cached + t
            page = int(block_table[b, slot // page_size])
            k_cache[page, slot % page_size] = k[b, t]
            v_cache[page, slot % page_size] = v[b, t]
        n_keys = cached + n_new
        n_pages = (n_keys + page_size - 1) // page_size

        qb = q[b].to(acc).transpose(0, 1)
        row = torch.arange(len_q).unsqueeze(1) + (n_keys - len_q)
        m_i = torch.full((n_heads, len_q, 1), -math.inf, dtype=acc)
        l_i = torch.zeros(n_heads, len_q, 1, dtype=acc)
        o_i = torch.zeros(n_heads, len_q, v_cache.shape[-1], dtype=acc)
        for j in range(n_pages):
            page = int(block_table[b, j])
            kp = k_cache[page].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            vp = v_cache[page].to(acc).transpose(0, 1).repeat_interleave(group, dim=0)
            s = torch.matmul(qb, kp.transpose(-1, -2)) * scale
            if softcap > 0.0:
                s = softcap * torch.tanh(s / softcap)
            col = (j * page_size + torch.arange(page_size)).unsqueeze(0)
            keep = (col < n_keys).expand(len_q, page_size)
            if right >= 0:
                keep = keep & (col <= row + right)
            if left >= 0:
                keep = keep & (col >= row - left)
            s = s.masked_fill(~keep, -math.inf)

            m_new = torch.maximum(m_i, s.amax(dim=-1, keepdim=True))
            m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_safe)
            p = torch.exp(s - m_safe)
            l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)
            o_i = o_i * alpha + torch.matmul(p, vp)
            m_i = m_new

        out[b] = (o_i / l_i.clamp_min(torch.finfo(acc).tiny)).transpose(0, 1).to(q.dtype)
        m_fin = torch.where(torch.isinf(m_i), torch.zeros_like(m_i), m_i)
        lse[b] = (m_fin + torch.log(l_i)).squeeze(-1)

    if return_softmax_lse:
        return out, lse
    return out
