TRUTH = {
    "api": "paged-decode",
    "bugs": [],
    "kind": "correct"
}

import math
import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    seqlens = cache_seqlens.long().clone()
    if k is not None:
        new = k.shape[1]
        for b in range(B):
            for t in range(new):
                p = int(seqlens[b]) + t
                blk = int(block_table[b, p // bs])
                k_cache[blk, p % bs].copy_(k[b, t])
                v_cache[blk, p % bs].copy_(v[b, t])
        seqlens = seqlens + new
    left, right = window_size
    if causal:
        right = 0
    head_kv = torch.arange(H) // (H // Hkv)
    qf = q.to(cdt)
    m = torch.full((B, Lq, H), float('-inf'), dtype=cdt)
    l = torch.zeros(B, Lq, H, dtype=cdt)
    acc = torch.zeros(B, Lq, H, D, dtype=cdt)
    for b in range(B):
        S = int(seqlens[b])
        qpos = torch.arange(Lq) + S - Lq
        for n in range(block_table.shape[1]):
            start = n * bs
            if start >= S:
                break
            blk = int(block_table[b, n])
            kpos = start + torch.arange(bs)
            kt = k_cache[blk][:, head_kv].to(cdt)
            vt = v_cache[blk][:, head_kv].to(cdt)
            s = torch.einsum('lhd,thd->lht', qf[b], kt) * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            ok = (kpos < S)[None, :].expand(Lq, bs)
            if left >= 0:
                ok = ok & (kpos[None, :] >= qpos[:, None] - left)
            if right >= 0:
                ok = ok & (kpos[None, :] <= qpos[:, None] + right)
            s = s.masked_fill(~ok[:, None, :], float('-inf'))
            m_new = torch.maximum(m[b], s.amax(-1))
            m_ref = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_ref[..., None])
            scale_old = torch.exp(m[b] - m_ref)
            l[b] = l[b] * scale_old + p.sum(-1)
            acc[b] = acc[b] * scale_old[..., None] + torch.einsum('lht,thd->lhd', p, vt)
            m[b] = m_new
    pos = l > 0
    out = acc / torch.where(pos, l, torch.ones_like(l))[..., None]
    lse = torch.where(pos, m + torch.log(torch.where(pos, l, torch.ones_like(l))), torch.full_like(l, float('-inf')))
    out = out.to(q.dtype)
    lse = lse.permute(0, 2, 1).contiguous()
    if return_softmax_lse:
        return out, lse
    return out
