TRUTH = {'api': 'paged-decode', 'bugs': ['the softcap is evaluated as softcap * tanh(s.float() / softcap).to(s.dtype), so for float64 inputs the capped scores are computed in float32 (~1e-7 relative error in out and lse) on the softcap case; float32/bfloat16 and non-softcap cases are unaffected'], 'kind': 'precision'}
import math

import torch


def _apply_softcap(s, softcap):
    if softcap <= 0:
        return s
    return (softcap * torch.tanh(s.float() / softcap)).to(s.dtype)


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    batch, q_len, n_heads, head_dim = q.shape
    page_size, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = n_heads // n_kv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0

    seqlens = cache_seqlens.tolist()
    if k is not None:
        for b in range(batch):
            for t in range(k.shape[1]):
                p = seqlens[b] + t
                page = block_table[b, p // page_size]
                k_cache[page, p % page_size] = k[b, t]
                v_cache[page, p % page_size] = v[b, t]
            seqlens[b] += k.shape[1]

    out = q.new_zeros(batch, q_len, n_heads, head_dim, dtype=work)
    lse = torch.full((batch, n_heads, q_len), -math.inf, dtype=work)
    for b in range(batch):
        S = seqlens[b]
        if S == 0:
            continue
        n_pages = -(-S // page_size)
        pages = block_table[b, :n_pages].long()
        kb = k_cache[pages].reshape(n_pages * page_size, n_kv, head_dim)[:S].to(work)
        vb = v_cache[pages].reshape(n_pages * page_size, n_kv, head_dim)[:S].to(work)
        qb = q[b].to(work).view(q_len, n_kv, group, head_dim)
        s = torch.einsum('qngd,snd->ngqs', qb, kb) * scale
        s = _apply_softcap(s, softcap)
        qi = torch.arange(q_len).view(-1, 1) + S - q_len
        kj = torch.arange(S).view(1, -1)
        keep = torch.ones(q_len, S, dtype=torch.bool)
        if left >= 0:
            keep &= kj >= qi - left
        if right >= 0:
            keep &= kj <= qi + right
        s = s.masked_fill(~keep, -math.inf)
        row_lse = torch.logsumexp(s, -1, keepdim=True)
        p = torch.exp(s - row_lse.masked_fill(torch.isneginf(row_lse), 0.0))
        o = torch.einsum('ngqs,snd->qngd', p, vb)
        out[b] = o.reshape(q_len, n_heads, head_dim)
        lse[b] = row_lse.reshape(n_heads, q_len)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
