TRUTH = {'api': 'paged-decode', 'bugs': ['the split-KV partial outputs and partial lse are written into float32 workspaces (o_accum / lse_accum) regardless of the input dtype and combined from there, so float64 inputs lose precision (~1e-7 relative) in out and lse on every case; float32/bfloat16 are unaffected'], 'kind': 'precision'}
import math

import torch

PAGES_PER_SPLIT = 2


def _combine(o_accum, lse_accum, n_splits):
    lse_accum = lse_accum[:n_splits]
    lse_max = lse_accum.amax(0)
    lse_max = torch.where(torch.isneginf(lse_max), torch.zeros_like(lse_max), lse_max)
    w = torch.exp(lse_accum - lse_max)
    tot = w.sum(0)
    lse = lse_max + torch.log(tot)
    o = (w.unsqueeze(-1) * o_accum[:n_splits]).sum(0) / torch.where(tot > 0, tot, torch.ones_like(tot)).unsqueeze(-1)
    return o, lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0

    if n_new:
        for b in range(B):
            pos = int(cache_seqlens[b]) + torch.arange(n_new)
            pages = block_table[b].long()[pos // bs]
            k_cache[pages, pos % bs] = k[b]
            v_cache[pages, pos % bs] = v[b]

    split_len = PAGES_PER_SPLIT * bs
    max_splits = (block_table.shape[1] + PAGES_PER_SPLIT - 1) // PAGES_PER_SPLIT
    out = torch.zeros(B, Lq, H, D, dtype=q.dtype)
    lse_out = torch.full((B, H, Lq), float('-inf'), dtype=ct)
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        n_splits = (S + split_len - 1) // split_len
        o_accum = torch.zeros(max_splits, H, Lq, D, dtype=torch.float32)
        lse_accum = torch.full((max_splits, H, Lq), float('-inf'), dtype=torch.float32)
        qb = q[b].to(ct).transpose(0, 1)
        qi = torch.arange(Lq).view(-1, 1) + (S - Lq)
        for sp in range(n_splits):
            lo, hi = sp * split_len, min((sp + 1) * split_len, S)
            pos = torch.arange(lo, hi)
            pages = block_table[b].long()[pos // bs]
            kk = k_cache[pages, pos % bs].to(ct).transpose(0, 1).repeat_interleave(g, 0)
            vv = v_cache[pages, pos % bs].to(ct).transpose(0, 1).repeat_interleave(g, 0)
            s = torch.matmul(qb, kk.transpose(1, 2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kj = pos.view(1, -1)
            keep = torch.ones(Lq, hi - lo, dtype=torch.bool)
            if left >= 0:
                keep &= kj >= qi - left
            if right >= 0:
                keep &= kj <= qi + right
            s = s.masked_fill(~keep, float('-inf'))
            m = s.amax(-1, keepdim=True)
            m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
            e = torch.exp(s - m)
            l = e.sum(-1, keepdim=True)
            o_accum[sp] = torch.matmul(e, vv) / torch.where(l > 0, l, torch.ones_like(l))
            lse_accum[sp] = (m + torch.log(l)).squeeze(-1)
        if n_splits == 0:
            continue
        o, lse = _combine(o_accum, lse_accum, n_splits)
        out[b] = o.transpose(0, 1).to(q.dtype)
        lse_out[b] = lse
    if return_softmax_lse:
        return out, lse_out
    return out
