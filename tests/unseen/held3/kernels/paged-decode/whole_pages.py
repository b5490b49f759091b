"""Paged-KV decode that processes whole pages as key tiles with a running (online) softmax."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the last page of a sequence is used in full: all block_size rows of every touched page are attended, so the "
        "stale/unused rows past cache_seqlens[b] + seqlen_new in the final page are treated as real keys (missing "
        "tail mask kpos < seqlen)",
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    _, P, Hkv, _ = k_cache.shape
    dev = q.device
    table = block_table.long() if block_table is not None else torch.arange(B, device=dev).view(B, 1)
    new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = table.shape[1] * P - new
    seqlens = (torch.full((B,), cache_seqlens, device=dev) if isinstance(cache_seqlens, int) else cache_seqlens).long()
    wt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    if new:
        pos = seqlens[:, None] + torch.arange(new, device=dev)[None, :]
        phys = table.gather(1, pos // P)
        k_cache[phys, pos % P] = k.to(k_cache.dtype)
        v_cache[phys, pos % P] = v.to(v_cache.dtype)

    lo, hi = window_size
    if causal:
        hi = 0
    rep = H // Hkv
    out = torch.empty(B, Lq, H, v_cache.shape[-1], dtype=wt, device=dev)
    lse = torch.empty(B, H, Lq, dtype=torch.float32, device=dev)
    for b in range(B):
        total = int(seqlens[b]) + new
        qh = q[b].to(wt).transpose(0, 1)
        qpos = torch.arange(Lq, device=dev)[:, None] + total - Lq
        run_max = torch.full((H, Lq), float("-inf"), dtype=wt, device=dev)
        run_sum = torch.zeros(H, Lq, dtype=wt, device=dev)
        acc = torch.zeros(H, Lq, v_cache.shape[-1], dtype=wt, device=dev)
        for blk in range(-(-total // P)):
            pg = table[b, blk]
            kt = k_cache[pg].to(wt).transpose(0, 1).repeat_interleave(rep, 0)
            vt = v_cache[pg].to(wt).transpose(0, 1).repeat_interleave(rep, 0)
            kpos = torch.arange(blk * P, (blk + 1) * P, device=dev)[None, :]
            s = (qh @ kt.transpose(1, 2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            valid = torch.ones(Lq, P, dtype=torch.bool, device=dev)
            if lo >= 0:
                valid &= kpos >= qpos - lo
            if hi >= 0:
                valid &= kpos <= qpos + hi
            s = s.masked_fill(~valid, float("-inf"))
            mx = torch.maximum(run_max, s.amax(-1))
            safe = mx.nan_to_num(neginf=0.0)
            corr = torch.exp(run_max - safe)
            p = torch.exp(s - safe[..., None])
            run_sum = run_sum * corr + p.sum(-1)
            acc = acc * corr[..., None] + p @ vt
            run_max = mx
        has = run_sum > 0
        denom = torch.where(has, run_sum, torch.ones_like(run_sum))
        out[b] = (acc / denom[..., None]).transpose(0, 1)
        lse[b] = torch.where(has, run_max + torch.log(denom), torch.full_like(denom, float("-inf"))).float()
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
