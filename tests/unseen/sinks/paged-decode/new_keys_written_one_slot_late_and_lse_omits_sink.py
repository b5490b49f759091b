"""flash_attn_with_kvcache with a learnable sink: append the new k/v through block_table, gather the sequence's keys
page by page and run a dense softmax with the sink as an extra column.
"""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "new k/v are written at positions cache_seqlens[b] + 1 .. cache_seqlens[b] + seqlen_new (one slot late), so "
        "the slot at cache_seqlens[b] keeps its garbage and is attended as a key while the last new key lands past "
        "the attended range (and an extra cache slot is overwritten)",
        "the returned softmax_lse is the log-sum-exp of the key scores only, leaving out the sink",
    ],
    "kind": "two",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=False,
           window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, learnable_sink=None):
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    block, Hkv = k_cache.shape[1], k_cache.shape[2]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    seq = cache_seqlens.long()
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cdt, device=q.device)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=cdt, device=q.device)
    new = 0
    if k is not None:
        new = k.shape[1]
        dst = seq.view(B, 1) + torch.arange(1, new + 1, device=q.device).view(1, new)  # B new
        pages = torch.gather(block_table.long(), 1, dst // block)
        k_cache[pages, dst % block] = k.to(k_cache.dtype)
        v_cache[pages, dst % block] = v.to(v_cache.dtype)
    for b in range(B):
        S = int(seq[b]) + new
        idx = torch.arange(S, device=q.device)
        kk = k_cache[block_table[b].long()[idx // block], idx % block].to(cdt)
        vv = v_cache[block_table[b].long()[idx // block], idx % block].to(cdt)
        kk = kk.repeat_interleave(H // Hkv, dim=1)
        vv = vv.repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("lhd,shd->hls", q[b].to(cdt), kk) * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(Lq, device=q.device).view(-1, 1) + S - Lq
        j = idx.view(1, -1)
        keep = torch.ones(Lq, S, dtype=torch.bool, device=q.device)
        if left >= 0:
            keep &= j >= i - left
        if right >= 0:
            keep &= j <= i + right
        s = s.masked_fill(~keep, float("-inf"))
        if learnable_sink is not None:
            sink = learnable_sink.to(cdt).view(H, 1, 1).expand(H, Lq, 1)
        else:
            sink = s.new_full((H, Lq, 1), float("-inf"))
        logits = torch.cat([s, sink], dim=-1)
        top = logits.amax(-1, keepdim=True)
        top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
        e = torch.exp(logits - top)
        z = e.sum(-1, keepdim=True)
        out[b] = torch.einsum("hls,shd->lhd", e[..., :S] / torch.where(z == 0, torch.ones_like(z), z), vv)
        z_keys = e[..., :S].sum(-1)
        lse[b] = top.squeeze(-1) + torch.log(z_keys)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
