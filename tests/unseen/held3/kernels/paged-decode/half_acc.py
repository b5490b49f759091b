"""Paged-KV decode with a streaming softmax over pages (running max, denominator and output carried page to page)."""
import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the running output accumulator and running denominator are stored in torch.float16 between pages (fixed dtype, "
        "also for float32 inputs), so each page's rescale-and-add is rounded to ~11 bits; float32 outputs come out only "
        "~1e-3 accurate. The running state should be float32",
    ],
    "kind": "precision",
}

_STATE = torch.float16


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    dev = q.device
    table = block_table.long() if block_table is not None else torch.arange(B, device=dev).view(B, 1)
    n_new = 0 if k is None else k.shape[1]
    if cache_seqlens is None:
        cache_seqlens = table.shape[1] * bs - n_new
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((B,), cache_seqlens, device=dev)
    seqlens = cache_seqlens.long()
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    st = f if q.dtype == torch.float64 else _STATE
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)

    if n_new:
        p = seqlens[:, None] + torch.arange(n_new, device=dev)[None]
        phys = table.gather(1, p // bs)
        k_cache[phys, p % bs] = k.to(k_cache.dtype)
        v_cache[phys, p % bs] = v.to(v_cache.dtype)

    lo, hi = window_size
    if causal:
        hi = 0
    rep = H // Hkv
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=f, device=dev)
    lse = torch.full((B, H, Lq), float("-inf"), dtype=torch.float32, device=dev)
    for b in range(B):
        K = int(seqlens[b]) + n_new
        qh = q[b].to(f).transpose(0, 1)
        qpos = torch.arange(Lq, device=dev)[:, None] + K - Lq
        m = torch.full((H, Lq), float("-inf"), dtype=f, device=dev)
        l = torch.zeros((H, Lq), dtype=st, device=dev)
        acc = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=st, device=dev)
        for j in range(0, K, bs):
            n = min(bs, K - j)
            page = table[b, j // bs]
            kt = k_cache[page, :n].to(f).transpose(0, 1).repeat_interleave(rep, 0)
            vt = v_cache[page, :n].to(f).transpose(0, 1).repeat_interleave(rep, 0)
            kpos = torch.arange(j, j + n, device=dev)[None]
            s = torch.matmul(qh, kt.transpose(1, 2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            vis = torch.ones(Lq, n, dtype=torch.bool, device=dev)
            if lo >= 0:
                vis &= kpos >= qpos - lo
            if hi >= 0:
                vis &= kpos <= qpos + hi
            s = s.masked_fill(~vis, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1))
            ref = m_new.nan_to_num(neginf=0.0)
            alpha = torch.exp(m - ref)
            pr = torch.exp(s - ref[..., None])
            l = (l.to(f) * alpha + pr.sum(-1)).to(st)
            acc = (acc.to(f) * alpha[..., None] + torch.matmul(pr, vt)).to(st)
            m = m_new
        lf = l.to(f)
        nz = lf > 0
        den = torch.where(nz, lf, torch.ones_like(lf))
        out[b] = (acc.to(f) / den[..., None]).transpose(0, 1)
        lse[b] = torch.where(nz, m + torch.log(den), torch.full_like(den, float("-inf"))).float()
    out = out.to(q.dtype)
    return (out, lse) if return_softmax_lse else out
