import math

import torch

TRUTH = {
    "api": "paged-decode",
    "bugs": [
        "Page loop runs over S_b // page_size pages (floor) instead of ceil(S_b / page_size): the last, partially filled page is never visited, so the final S_b % page_size keys are ignored (and a sequence shorter than one page sees no key)."
    ],
    "kind": "semantic"
}



def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    """Page-by-page decode: one online-softmax step per page of the block table."""
    B, Lq, H, D = q.shape
    nblk, bs, Hkv, _ = k_cache.shape
    g = H // Hkv
    sm = softmax_scale if softmax_scale is not None else D ** -0.5
    wdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    knew = 0 if k is None else k.shape[1]

    if knew:
        kflat = k_cache.view(nblk * bs, Hkv, D)
        vflat = v_cache.view(nblk * bs, Hkv, v_cache.shape[-1])
        for b in range(B):
            p0 = int(cache_seqlens[b])
            pos = torch.arange(p0, p0 + knew)
            slot = block_table[b].long()[pos // bs] * bs + pos % bs
            kflat.index_copy_(0, slot, k[b].to(k_cache.dtype))
            vflat.index_copy_(0, slot, v[b].to(v_cache.dtype))

    left, right = window_size
    if causal:
        right = 0
    outs, lses = [], []
    for b in range(B):
        S = int(cache_seqlens[b]) + knew
        qb = q[b].to(wdt).permute(1, 0, 2).reshape(Hkv, g * Lq, D) * sm     # rows: (group, query)
        qpos = (torch.arange(Lq) + S - Lq).repeat(g)[:, None]
        m = torch.full((Hkv, g * Lq, 1), float('-inf'), dtype=wdt)
        l = torch.zeros(Hkv, g * Lq, 1, dtype=wdt)
        acc = torch.zeros(Hkv, g * Lq, v_cache.shape[-1], dtype=wdt)
        for pi in range(S // bs):
            n = min(bs, S - pi * bs)
            blk = int(block_table[b, pi])
            kp = k_cache[blk, :n].to(wdt).transpose(0, 1)                  # (Hkv, n, D)
            vp = v_cache[blk, :n].to(wdt).transpose(0, 1)
            s = torch.matmul(qb, kp.transpose(1, 2))
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(pi * bs, pi * bs + n)[None, :]
            ok = torch.ones(qpos.shape[0], n, dtype=torch.bool)
            if left >= 0:
                ok &= kpos >= qpos - left
            if right >= 0:
                ok &= kpos <= qpos + right
            s = s.masked_fill(~ok, float('-inf'))
            m2 = torch.maximum(m, s.amax(-1, keepdim=True))
            shift = torch.where(torch.isinf(m2), torch.zeros_like(m2), m2)
            e = torch.exp(s - shift)
            r = torch.exp(m - shift)
            l.mul_(r).add_(e.sum(-1, keepdim=True))
            acc.mul_(r).add_(torch.matmul(e, vp))
            m = m2
        hit = l > 0
        o = acc / torch.where(hit, l, torch.ones_like(l))
        ls = torch.where(hit, m + torch.log(torch.where(hit, l, torch.ones_like(l))), torch.full_like(l, float('-inf')))
        outs.append(o.view(H, Lq, -1).transpose(0, 1))
        lses.append(ls.view(H, Lq))
    out = torch.stack(outs).to(q.dtype)
    if return_softmax_lse:
        return out, torch.stack(lses)
    return out
