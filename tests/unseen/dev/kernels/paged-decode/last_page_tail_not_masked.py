"""Page-granular paged attention: gathers whole pages (block_size slots each) per sequence and runs one softmax
over them; pages past the sequence are never gathered."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the unused slots at the end of a sequence's last page (positions S_b .. ceil(S_b / block_size) * "
        "block_size - 1) are gathered and never masked, so their garbage keys/values are attended"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(new):
            pos = n0 + t
            k_cache[block_table[b, pos // bs], pos % bs] = k[b, t]
            v_cache[block_table[b, pos // bs], pos % bs] = v[b, t]
        S = n0 + new
        n_pages = (S + bs - 1) // bs
        if n_pages == 0:
            continue
        pages = block_table[b, :n_pages].long()
        kk = k_cache[pages].reshape(n_pages * bs, Hkv, D).to(acc).repeat_interleave(H // Hkv, 1)
        vv = v_cache[pages].reshape(n_pages * bs, Hkv, D).to(acc).repeat_interleave(H // Hkv, 1)
        s = torch.einsum("lhd,shd->hls", q[b].to(acc), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qi = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        kj = torch.arange(n_pages * bs, device=q.device)[None, :]
        vis = torch.ones(Lq, n_pages * bs, dtype=torch.bool, device=q.device)
        if left >= 0:
            vis &= kj >= qi - left
        if right >= 0:
            vis &= kj <= qi + right
        s = s.masked_fill(~vis, -math.inf)
        lb = torch.logsumexp(s, -1)
        pr = torch.exp(s - torch.where(torch.isinf(lb), torch.zeros_like(lb), lb)[..., None])
        out[b] = torch.einsum("hls,shd->lhd", pr, vv).to(q.dtype)
        lse[b] = lb.float()
    return (out, lse) if return_softmax_lse else out
