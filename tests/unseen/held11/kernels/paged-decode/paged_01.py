TRUTH = {'api': 'paged-decode', 'bugs': ['when appending k/v the destination page is looked up once from cache_seqlens[b] and every new token is written to slot (cache_seqlens[b] + t) % block_size of that same page; when the new tokens cross a page boundary they wrap around to the start of the current page, overwriting old cache slots and leaving the next page stale (append_cross_page: wrong k_cache/v_cache and output)'], 'kind': 'semantic'}
import math

import torch


def _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table):
    block_size = k_cache.shape[1]
    for b in range(k.shape[0]):
        start = int(cache_seqlens[b])
        page = int(block_table[b, start // block_size])
        for t in range(k.shape[1]):
            slot = (start + t) % block_size
            k_cache[page, slot] = k[b, t]
            v_cache[page, slot] = v[b, t]


def _gather(cache, pages, n, block_size):
    flat = cache[pages].reshape(-1, *cache.shape[2:])
    return flat[:n]


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_new = 0
    if k is not None:
        _append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
        n_new = k.shape[1]

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, D, dtype=ct)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=ct)
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        if S == 0:
            continue
        n_pages = (S + block_size - 1) // block_size
        pages = block_table[b, :n_pages].long()
        kk = _gather(k_cache, pages, S, block_size).to(ct).repeat_interleave(H // Hkv, dim=1)
        vv = _gather(v_cache, pages, S, block_size).to(ct).repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum('qhd,khd->hqk', q[b].to(ct), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq).view(-1, 1) + (S - Lq)
        j = torch.arange(S).view(1, -1)
        keep = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
        s = s.masked_fill(~keep, float('-inf'))
        row_lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - row_lse.nan_to_num(neginf=0.0).unsqueeze(-1))
        out[b] = torch.einsum('hqk,khd->qhd', p, vv)
        lse[b] = row_lse
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
