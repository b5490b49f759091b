TRUTH = {'api': 'paged-decode', 'bugs': ['the number of pages each sequence visits is computed from cache_seqlens before the new k/v are appended, ceil(cache_seqlens[b] / block_size); when the appended tokens spill into a new page (or the cache was empty) that page is never read, so the newest keys are ignored (append_cross_page, Lq>S_causal_append, decode_append with its empty-cache sequence)'], 'kind': 'semantic'}
import math

import torch


def _page_partial(qb, kp, vp, scale, softcap, qpos, kpos, left, right):
    # qb: (Hkv, g*Lq, D) ; kp/vp: (Hkv, n, D)
    s = torch.matmul(qb, kp.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    keep = torch.ones(qpos.shape[0], kpos.shape[1], dtype=torch.bool)
    if left >= 0:
        keep &= kpos >= qpos - left
    if right >= 0:
        keep &= kpos <= qpos + right
    s = s.masked_fill(~keep, float('-inf'))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    return torch.matmul(e, vp), m, l


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0
    n_new = 0 if k is None else k.shape[1]

    out = torch.empty(B, Lq, H, D, dtype=ct)
    lse = torch.empty(B, H, Lq, dtype=ct)
    for b in range(B):
        cached = int(cache_seqlens[b])
        n_pages = (cached + bs - 1) // bs
        for t in range(n_new):
            p = cached + t
            blk = int(block_table[b, p // bs])
            k_cache[blk, p % bs] = k[b, t]
            v_cache[blk, p % bs] = v[b, t]
        S = cached + n_new
        qb = q[b].to(ct).view(Lq, Hkv, g, D).permute(1, 2, 0, 3).reshape(Hkv, g * Lq, D)
        qpos = (torch.arange(Lq) + S - Lq).repeat(g).view(-1, 1)
        acc = torch.zeros(Hkv, g * Lq, D, dtype=ct)
        m_run = torch.full((Hkv, g * Lq, 1), float('-inf'), dtype=ct)
        l_run = torch.zeros(Hkv, g * Lq, 1, dtype=ct)
        for i in range(n_pages):
            lo = i * bs
            hi = min(lo + bs, S)
            blk = int(block_table[b, i])
            kp = k_cache[blk, :hi - lo].to(ct).permute(1, 0, 2)
            vp = v_cache[blk, :hi - lo].to(ct).permute(1, 0, 2)
            kpos = torch.arange(lo, hi).view(1, -1)
            o_i, m_i, l_i = _page_partial(qb, kp, vp, scale, softcap, qpos, kpos, left, right)
            m_i = torch.where(l_i > 0, m_i, torch.full_like(m_i, float('-inf')))
            m_new = torch.maximum(m_run, m_i)
            base = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            a = torch.exp(m_run - base)
            c = torch.exp(m_i - base)
            acc = acc * a + o_i * c
            l_run = l_run * a + l_i * c
            m_run = m_new
        o = acc / torch.where(l_run > 0, l_run, torch.ones_like(l_run))
        base = torch.where(torch.isneginf(m_run), torch.zeros_like(m_run), m_run)
        out[b] = o.view(Hkv, g, Lq, D).permute(2, 0, 1, 3).reshape(Lq, H, D)
        lse[b] = (base + torch.log(l_run)).view(H, Lq)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
