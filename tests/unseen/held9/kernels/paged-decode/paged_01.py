TRUTH = {'api': 'paged-decode', 'bugs': [], 'kind': 'correct'}

import math
import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    new = 0 if k is None else k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=cd)
    lse = torch.full((B, H, Lq), -math.inf, dtype=cd)
    for b in range(B):
        n0 = int(cache_seqlens[b])
        for t in range(new):
            p = n0 + t
            page = int(block_table[b, p // bs])
            k_cache[page, p % bs] = k[b, t]
            v_cache[page, p % bs] = v[b, t]
        S = n0 + new
        if S == 0:
            continue
        npages = (S + bs - 1) // bs
        pages = block_table[b, :npages].long()
        kk = k_cache[pages].reshape(npages * bs, Hkv, D)[:S].to(cd)
        vv = v_cache[pages].reshape(npages * bs, Hkv, -1)[:S].to(cd)
        kk = kk.repeat_interleave(g, dim=1).transpose(0, 1)
        vv = vv.repeat_interleave(g, dim=1).transpose(0, 1)
        qq = q[b].to(cd).transpose(0, 1)
        s = torch.matmul(qq, kk.transpose(-1, -2)) * sc
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qpos = torch.arange(Lq).view(Lq, 1) + (S - Lq)
        kpos = torch.arange(S).view(1, S)
        ok = torch.ones(Lq, S, dtype=torch.bool)
        if left >= 0:
            ok = ok & (kpos >= qpos - left)
        if right >= 0:
            ok = ok & (kpos <= qpos + right)
        s = s.masked_fill(~ok, -math.inf)
        seen = ok.any(dim=-1)
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)
        den = e.sum(dim=-1, keepdim=True)
        o = torch.matmul(e, vv) / torch.where(den > 0, den, torch.ones_like(den))
        out[b] = o.transpose(0, 1)
        lse[b] = torch.where(seen, (m + torch.log(den)).squeeze(-1), torch.full((H, Lq), -math.inf, dtype=cd))
    out = out.to(dt)
    if return_softmax_lse:
        return out, lse.float() if cd == torch.float32 else lse
    return out
