import math

import torch

TRUTH = {'api': 'paged-decode', 'bugs': ['The returned lse takes log of the row sum after casting it to float16 (log(l.half())), so lse has ~1e-3 absolute error (shows for float32/float64 inputs; output unaffected); correct in exact arithmetic.'], 'kind': 'precision'}


def _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table):
    page = k_cache.shape[1]
    B, n_new = k.shape[0], k.shape[1]
    for b in range(B):
        pos = int(cache_seqlens[b]) + torch.arange(n_new)
        blocks = block_table[b].long()[pos // page]
        slots = pos % page
        k_cache[blocks, slots] = k[b].to(k_cache.dtype)
        v_cache[blocks, slots] = v[b].to(v_cache.dtype)
    return k_cache, v_cache


def _load_page(cache, blk, group, acc):
    x = cache[blk].to(acc).transpose(0, 1)
    if group > 1:
        x = x.repeat_interleave(group, dim=0)
    return x


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    page, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = H // Hkv
    if block_table is None:
        block_table = torch.arange(B, dtype=torch.int32)[:, None]
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), page * block_table.shape[1], dtype=torch.int32)
    n_new = 0
    if k is not None:
        k_cache, v_cache = _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
        n_new = k.shape[1]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=acc)
    lse = torch.full((B, H, Lq), -math.inf, dtype=acc)
    for b in range(B):
        seqlen = int(cache_seqlens[b]) + n_new
        off = seqlen - Lq
        qb = q[b].transpose(0, 1).to(acc) * scale
        rows = torch.arange(Lq) + off
        m_i = torch.full((H, Lq), -math.inf, dtype=acc)
        l_i = torch.zeros(H, Lq, dtype=acc)
        o_i = torch.zeros(H, Lq, v_cache.shape[-1], dtype=acc)
        n_pages = (seqlen + page - 1) // page
        for p in range(n_pages):
            blk = int(block_table[b, p])
            kp = _load_page(k_cache, blk, group, acc)
            vp = _load_page(v_cache, blk, group, acc)
            cols = p * page + torch.arange(page)
            s = torch.matmul(qb, kp.transpose(-1, -2))
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            valid = (cols < seqlen)[None, :].expand(Lq, page).clone()
            if left >= 0:
                valid &= cols[None, :] >= rows[:, None] - left
            if right >= 0:
                valid &= cols[None, :] <= rows[:, None] + right
            s = s.masked_fill(~valid, -math.inf)
            m_new = torch.maximum(m_i, s.amax(-1))
            m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            pexp = torch.exp(s - m_use[..., None])
            scale_old = torch.exp(m_i - m_use)
            l_i = l_i * scale_old + pexp.sum(-1)
            o_i = o_i * scale_old[..., None] + torch.matmul(pexp, vp)
            m_i = m_new
        has = l_i > 0
        l_div = torch.where(has, l_i, torch.ones_like(l_i))
        out[b] = torch.where(has[..., None], o_i / l_div[..., None], torch.zeros_like(o_i)).transpose(0, 1)
        lse[b] = torch.where(has, m_i + torch.log(l_div.to(torch.float16)).to(acc), torch.full_like(m_i, -math.inf))
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
