TRUTH = {'api': 'paged-decode', 'bugs': ['the query diagonal is placed at cache_seqlens[b] + i - Lq, i.e. computed from the cache length before the new k/v are appended instead of from S_b = cache_seqlens[b] + seqlen_new; with appended keys every causal/window mask is shifted left by seqlen_new (spec4_causal_append_gqa, append_cross_page, Lq>S_causal_append, noncausal_Lq4_append_window); without new keys it is right'], 'kind': 'semantic'}
import math

import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    batch, seqlen_q, nheads, d = q.shape
    num_blocks, page_size, nheads_k, _ = k_cache.shape
    max_pages = block_table.shape[1]
    scale = softmax_scale if softmax_scale is not None else d ** -0.5
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32

    seqlens = cache_seqlens.long()
    diag = seqlens - seqlen_q
    if k is not None:
        seqlen_new = k.shape[1]
        pos = seqlens.view(-1, 1) + torch.arange(seqlen_new).view(1, -1)
        pages = torch.gather(block_table.long(), 1, pos // page_size)
        k_cache[pages, pos % page_size] = k
        v_cache[pages, pos % page_size] = v
        seqlens = seqlens + seqlen_new

    # gather every listed page, mask by length
    n_keys = max_pages * page_size
    keys = k_cache[block_table.long()].reshape(batch, n_keys, nheads_k, d).to(acc)
    vals = v_cache[block_table.long()].reshape(batch, n_keys, nheads_k, d).to(acc)
    keys = keys.repeat_interleave(nheads // nheads_k, dim=2)
    vals = vals.repeat_interleave(nheads // nheads_k, dim=2)

    s = torch.einsum('bqhd,bkhd->bhqk', q.to(acc), keys) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qi = (torch.arange(seqlen_q).view(1, -1) + diag.view(-1, 1)).view(batch, 1, seqlen_q, 1)
    kj = torch.arange(n_keys).view(1, 1, 1, n_keys)
    ok = kj < seqlens.view(batch, 1, 1, 1)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        ok = ok & (kj >= qi - left)
    if right >= 0:
        ok = ok & (kj <= qi + right)
    s = s.masked_fill(~ok, float('-inf'))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse).unsqueeze(-1))
    out = torch.einsum('bhqk,bkhd->bqhd', p, vals).to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
