"""Paged KV-cache decode: append the new tokens after the last cached one, then a dense float32 attention per sequence.

The cache length is the index of the last cached token + 1, so new tokens go right after it.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "new token t is written at position cache_seqlens[b] + 1 + t instead of cache_seqlens[b] + t, so the slot at "
        "position cache_seqlens[b] keeps its garbage (and is attended), the last new token lands one slot past the "
        "sequence (overwriting a slot that must stay unchanged) and is not attended"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else D ** -0.5
    n_new = 0 if k is None else k.shape[1]
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=ct, device=q.device)
    lse = torch.full((B, H, Lq), -math.inf, dtype=ct, device=q.device)
    wl, wr = window_size
    if causal:
        wr = 0
    for b in range(B):
        last = int(cache_seqlens[b])           # position of the last cached token + 1
        for t in range(n_new):
            p = last + 1 + t
            blk = int(block_table[b, p // bs])
            k_cache[blk, p % bs] = k[b, t]
            v_cache[blk, p % bs] = v[b, t]
        S = last + n_new
        if S == 0:
            continue
        idx = torch.arange(S, device=q.device)
        blocks = block_table[b, idx // bs].long()
        kb = k_cache[blocks, idx % bs].to(ct)
        vb = v_cache[blocks, idx % bs].to(ct)
        kb = kb.repeat_interleave(H // Hkv, dim=1).permute(1, 2, 0)        # (H, D, S)
        vb = vb.repeat_interleave(H // Hkv, dim=1).transpose(0, 1)         # (H, S, D)
        s = q[b].to(ct).transpose(0, 1) @ kb * scale                      # (H, Lq, S)
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        ok = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if wl >= 0:
            ok &= idx >= qi - wl
        if wr >= 0:
            ok &= idx <= qi + wr
        s = s.masked_fill(~ok, -math.inf)
        mx = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        w = (s - mx).exp()
        den = w.sum(-1, keepdim=True)
        out[b] = (w @ vb / den.clamp_min(1e-30)).transpose(0, 1)
        lse[b] = (mx + den.log()).squeeze(-1)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
