"""flash_attn_with_kvcache port: scatter the new K/V into their pages, then attend the cached prefix page by page
with an online softmax."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "after appending k/v the kernel attends only cache_seqlens[b] keys (the length before the append), so "
        "the new tokens are written to the cache but never attended"
    ],
    "kind": "semantic",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else softmax_scale
    left, right = window_size
    if causal:
        right = 0
    rep = H // Hkv
    seqlens = cache_seqlens.tolist()
    if k is not None:
        for b in range(B):
            for t in range(k.shape[1]):
                p = seqlens[b] + t
                page = int(block_table[b, p // bs])
                k_cache[page, p % bs] = k[b, t]
                v_cache[page, p % bs] = v[b, t]
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        S = seqlens[b]
        qb = q[b].to(f).transpose(0, 1)                         # H Lq D
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        m = torch.full((H, Lq, 1), -math.inf, dtype=f, device=q.device)
        run_l = torch.zeros((H, Lq, 1), dtype=f, device=q.device)
        acc = torch.zeros((H, Lq, D), dtype=f, device=q.device)
        for blk in range(-(-S // bs)):
            page = int(block_table[b, blk])
            n = min(bs, S - blk * bs)
            kt = k_cache[page, :n].to(f).repeat_interleave(rep, 1).transpose(0, 1)   # H n D
            vt = v_cache[page, :n].to(f).repeat_interleave(rep, 1).transpose(0, 1)
            s = qb @ kt.transpose(-1, -2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(blk * bs, blk * bs + n, device=q.device)[None, :]
            ok = torch.ones(Lq, n, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p_ = torch.exp(s - m_use)
            run_l = run_l * alpha + p_.sum(-1, keepdim=True)
            acc = acc * alpha + p_ @ vt
            m = m_new
        has = run_l > 0
        out[b] = (acc / torch.where(has, run_l, torch.ones_like(run_l))).transpose(0, 1).to(q.dtype)
        lse[b] = torch.where(has, m + torch.log(torch.where(has, run_l, torch.ones_like(run_l))), m).squeeze(-1).float()
    return (out, lse) if return_softmax_lse else out
