"""flash_attn_with_kvcache with a learnable sink: decode-only calls attend the gathered cache with the sink as an
extra softmax column; calls that bring new k/v write them into their pages and attend cache + new keys in one go.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": ["when k and v are passed (the append path) attention is computed by a separate branch that leaves the "
             "sink out, so those calls return out and lse as if learnable_sink were None"],
    "kind": "semantic",
}


def _mask(Lq, S, causal, window_size, device):
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(Lq, device=device).view(-1, 1) + S - Lq
    j = torch.arange(S, device=device).view(1, -1)
    ok = torch.ones(Lq, S, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= i - left
    if right >= 0:
        ok &= j <= i + right
    return ok


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=cdt, device=q.device)
    for b in range(B):
        n = int(cache_seqlens[b])
        if k is not None:
            pos_new = torch.arange(n, n + k.shape[1], device=q.device)
            blk = block_table[b].long()[pos_new // bs]
            k_cache[blk, pos_new % bs] = k[b].to(k_cache.dtype)
            v_cache[blk, pos_new % bs] = v[b].to(v_cache.dtype)
            n += k.shape[1]
        pos = torch.arange(n, device=q.device)
        blk = block_table[b].long()[pos // bs]
        kb = k_cache[blk, pos % bs].to(cdt).repeat_interleave(H // Hkv, dim=1)  # S H D
        vb = v_cache[blk, pos % bs].to(cdt).repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("qhd,shd->hqs", q[b].to(cdt), kb) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~_mask(Lq, n, causal, window_size, q.device), float("-inf"))
        if k is None and learnable_sink is not None:
            col = learnable_sink.to(cdt).view(H, 1, 1).expand(H, Lq, 1)
            s = torch.cat([s, col], dim=-1)
        mx = s.amax(-1, keepdim=True) if s.shape[-1] else s.new_full((H, Lq, 1), float("-inf"))
        mx = torch.where(torch.isneginf(mx), torch.zeros_like(mx), mx)
        e = torch.exp(s - mx)
        z = e.sum(-1, keepdim=True)
        out[b] = torch.einsum("hqs,shd->qhd", e[..., :n] / torch.where(z == 0, torch.ones_like(z), z), vb)
        lse[b] = (mx + torch.log(z)).squeeze(-1)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
