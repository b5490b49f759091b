TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "new keys are written at flat slot block_table[b,0]*block_size + pos (assumes a sequence's pages are contiguous) instead of through block_table; cache and outputs wrong on every append case"
    ],
    "kind": "semantic"
}

import math
import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    nblk, bs, Hkv, _ = k_cache.shape
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    new = 0 if k is None else k.shape[1]
    if new:
        for b in range(B):
            pos = int(cache_seqlens[b]) + torch.arange(new)
            flat = int(block_table[b, 0]) * bs + pos
            k_cache.view(-1, Hkv, D)[flat] = k[b].to(k_cache.dtype)
            v_cache.view(-1, Hkv, D)[flat] = v[b].to(v_cache.dtype)
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, D, dtype=cdt)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=cdt)
    for b in range(B):
        S = int(cache_seqlens[b]) + new
        if S == 0:
            continue
        pos = torch.arange(S)
        blks = block_table[b].long()[pos // bs]
        kk = k_cache[blks, pos % bs].to(cdt).repeat_interleave(H // Hkv, dim=1)
        vv = v_cache[blks, pos % bs].to(cdt).repeat_interleave(H // Hkv, dim=1)
        qq = q[b].to(cdt)
        s = torch.einsum('lhd,shd->hls', qq, kk) * sc
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq)[:, None] + S - Lq
        j = pos[None, :]
        ok = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            ok &= j >= i - left
        if right >= 0:
            ok &= j <= i + right
        s = s.masked_fill(~ok, float('-inf'))
        has = ok.any(-1)
        m = torch.where(has, s.amax(-1), torch.zeros_like(s[..., 0]))
        p = torch.exp(s - m[..., None])
        l = p.sum(-1)
        l1 = torch.where(has, l, torch.ones_like(l))
        out[b] = torch.einsum('hls,shd->lhd', p / l1[..., None], vv)
        lse[b] = torch.where(has, m + torch.log(l1), torch.full_like(l, float('-inf')))
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
