"""Paged decode as a loop over pages with an online softmax; the running output and running sum are kept in the
cache's dtype like the page tiles themselves, the running max in float32."""

import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "the running output accumulator and running sum are rounded to the cache dtype (bfloat16/float16) after "
        "every page, so over long contexts (hundreds of pages) the rounding errors accumulate and the output "
        "and lse errors are several times PyTorch's"
    ],
    "kind": "precision",
}


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    f = torch.float64 if q.dtype == torch.float64 else torch.float32
    low = k_cache.dtype
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    rep = H // Hkv
    out = torch.zeros_like(q)
    lse = torch.full((B, H, Lq), -math.inf, dtype=torch.float32, device=q.device)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(new):
            p = n0 + t
            k_cache[block_table[b, p // bs], p % bs] = k[b, t].to(low)
            v_cache[block_table[b, p // bs], p % bs] = v[b, t].to(low)
        S = n0 + new
        qh = q[b].to(f).transpose(0, 1)
        qpos = torch.arange(Lq, device=q.device)[:, None] + S - Lq
        m_i = torch.full((H, Lq, 1), -math.inf, dtype=f, device=q.device)
        l_i = torch.zeros((H, Lq, 1), dtype=low, device=q.device)
        o_i = torch.zeros((H, Lq, D), dtype=low, device=q.device)
        for j in range(-(-S // bs)):
            page = int(block_table[b, j])
            n = min(bs, S - j * bs)
            kt = k_cache[page, :n].to(f).repeat_interleave(rep, 1).transpose(0, 1)
            vt = v_cache[page, :n].to(f).repeat_interleave(rep, 1).transpose(0, 1)
            s = qh @ kt.transpose(-1, -2) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(j * bs, j * bs + n, device=q.device)[None, :]
            ok = torch.ones(Lq, n, dtype=torch.bool, device=q.device)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, -math.inf)
            m_new = torch.maximum(m_i, s.amax(-1, keepdim=True))
            m_use = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m_i - m_use)
            pt = torch.exp(s - m_use)
            l_i = (l_i.to(f) * alpha + pt.sum(-1, keepdim=True)).to(low)
            o_i = (o_i.to(f) * alpha + pt @ vt).to(low)
            m_i = m_new
        l_f = l_i.to(f)
        has = l_f > 0
        out[b] = (o_i.to(f) / torch.where(has, l_f, torch.ones_like(l_f))).transpose(0, 1).to(q.dtype)
        lse[b] = torch.where(has, m_i + torch.log(torch.where(has, l_f, torch.ones_like(l_f))),
                             torch.full_like(m_i, -math.inf)).squeeze(-1).float()
    return (out, lse) if return_softmax_lse else out
