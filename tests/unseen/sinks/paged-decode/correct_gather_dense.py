"""flash_attn_with_kvcache with a learnable sink: write the new keys through block_table, gather each sequence's
pages into a dense (S_b, Hkv, D) tensor, and softmax with the sink as one more column.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [],
    "kind": "correct",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    seqlens = cache_seqlens.tolist() if cache_seqlens is not None else [0] * B
    n_new = k.shape[1] if k is not None else 0

    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=cdt, device=q.device)
    for b in range(B):
        if n_new:
            pos = torch.arange(seqlens[b], seqlens[b] + n_new, device=q.device)
            pages = block_table[b].long()[pos // block_size]
            k_cache[pages, pos % block_size] = k[b].to(k_cache.dtype)
            v_cache[pages, pos % block_size] = v[b].to(v_cache.dtype)
        S = seqlens[b] + n_new
        pos = torch.arange(S, device=q.device)
        pages = block_table[b].long()[pos // block_size]
        kb = k_cache[pages, pos % block_size].to(cdt).permute(1, 0, 2).repeat_interleave(group, dim=0)  # H S D
        vb = v_cache[pages, pos % block_size].to(cdt).permute(1, 0, 2).repeat_interleave(group, dim=0)
        qb = q[b].to(cdt).permute(1, 0, 2)  # H Lq D
        s = torch.matmul(qb, kb.transpose(-2, -1)) * scale
        if softcap > 0.0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device).view(-1, 1) + S - Lq
        j = pos.view(1, -1)
        ok = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            ok &= j >= i - left
        if right >= 0:
            ok &= j <= i + right
        s = s.masked_fill(~ok, float("-inf"))
        if learnable_sink is not None:
            col = learnable_sink.to(cdt).view(H, 1, 1).expand(H, Lq, 1)
        else:
            col = torch.full((H, Lq, 1), float("-inf"), dtype=cdt, device=q.device)
        row_lse = torch.logsumexp(torch.cat([s, col], dim=-1), dim=-1)
        safe = torch.where(torch.isneginf(row_lse), torch.zeros_like(row_lse), row_lse)
        p = torch.exp(s - safe.unsqueeze(-1))
        out[b] = torch.matmul(p, vb).permute(1, 0, 2)
        lse[b] = row_lse
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
