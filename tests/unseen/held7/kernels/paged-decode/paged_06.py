import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "New keys are written into the cache but the attention only reads the cache_seqlens[b] old keys (S = cache_seqlens[b] instead of cache_seqlens[b] + seqlen_new): the appended keys are never attended, and the query diagonal is shifted. Wrong out/lse for every case with k/v given (caches are right).",
        "The query and the gathered keys are cast with .float() instead of to the compute dtype, so for float64 inputs the scores, softmax and lse are computed in float32 (~1e-7 relative error). Float32/bfloat16 unaffected."
    ],
    "kind": "two"
}



def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    page = k_cache.shape[1]
    Hkv = k_cache.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_new = 0 if k is None else k.shape[1]
    lens = cache_seqlens.tolist()

    # 1) append the new keys/values in place, through the block table
    if n_new:
        for b in range(B):
            pos = torch.arange(lens[b], lens[b] + n_new)
            pages = block_table[b, pos // page].long()
            k_cache[pages, pos % page] = k[b].to(k_cache.dtype)
            v_cache[pages, pos % page] = v[b].to(v_cache.dtype)

    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=cdt)
    for b in range(B):
        S = lens[b]
        if S == 0:
            continue
        pos = torch.arange(S)
        kk = k_cache[block_table[b, pos // page].long(), pos % page].float()     # (S, Hkv, D)
        vv = v_cache[block_table[b, pos // page].long(), pos % page].to(cdt)
        qb = q[b].float().view(Lq, Hkv, g, D)
        s = torch.einsum('qhgd,shd->hgqs', qb, kk).reshape(H, Lq, S) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq)[:, None] + (S - Lq)
        kj = pos[None, :]
        vis = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            vis &= kj >= qi - left
        if right >= 0:
            vis &= kj <= qi + right
        s = s.masked_fill(~vis, float('-inf'))
        lb = torch.logsumexp(s, -1)                                   # (H, Lq)
        fin = torch.isfinite(lb)
        p = torch.exp(s - torch.where(fin, lb, torch.zeros_like(lb))[..., None])
        o = torch.einsum('hgqs,shd->qhgd', p.view(Hkv, g, Lq, S).to(cdt), vv).reshape(Lq, H, -1)
        out[b] = o
        lse[b] = lb
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
    return out
