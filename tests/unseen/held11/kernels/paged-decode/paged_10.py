TRUTH = {'api': 'paged-decode', 'bugs': [], 'kind': 'correct'}
import math

import torch

NUM_SPLITS = 3


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    ct = torch.float64 if q.dtype == torch.float64 else torch.float32
    left, right = window_size
    if causal:
        right = 0
    lens = cache_seqlens.long().clone()

    if k is not None:
        n = k.shape[1]
        pos = lens.view(B, 1) + torch.arange(n).view(1, n)
        page = block_table.long().gather(1, pos // bs)
        k_cache.index_put_((page.flatten(), (pos % bs).flatten()), k.reshape(B * n, Hkv, D))
        v_cache.index_put_((page.flatten(), (pos % bs).flatten()), v.reshape(B * n, Hkv, D))
        lens += n

    out = torch.zeros(B, Lq, H, D, dtype=ct)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=ct)
    for b in range(B):
        S = int(lens[b])
        if S == 0:
            continue
        qg = q[b].to(ct).view(Lq, Hkv, g, D).permute(1, 2, 0, 3)
        qi = torch.arange(Lq).view(-1, 1) + (S - Lq)
        span = (S + NUM_SPLITS - 1) // NUM_SPLITS
        o_parts, l_parts = [], []
        for lo in range(0, S, span):
            hi = min(lo + span, S)
            p = torch.arange(lo, hi)
            pg = block_table[b].long()[p // bs]
            kk = k_cache[pg, p % bs].to(ct).permute(1, 0, 2).unsqueeze(1)
            vv = v_cache[pg, p % bs].to(ct).permute(1, 0, 2).unsqueeze(1)
            s = torch.matmul(qg, kk.transpose(-1, -2)) * scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kj = p.view(1, -1)
            ok = torch.ones(Lq, hi - lo, dtype=torch.bool)
            if left >= 0:
                ok &= kj >= qi - left
            if right >= 0:
                ok &= kj <= qi + right
            s = s.masked_fill(~ok, float('-inf'))
            part_lse = torch.logsumexp(s, -1, keepdim=True)
            w = torch.exp(s - torch.where(torch.isneginf(part_lse), torch.zeros_like(part_lse), part_lse))
            o_parts.append(torch.matmul(w, vv))
            l_parts.append(part_lse)
        l_all = torch.stack(l_parts)
        tot = torch.logsumexp(l_all, 0)
        tot_safe = torch.where(torch.isneginf(tot), torch.zeros_like(tot), tot)
        o = (torch.exp(l_all - tot_safe) * torch.stack(o_parts)).sum(0)
        out[b] = o.permute(2, 0, 1, 3).reshape(Lq, H, D)
        lse[b] = tot.reshape(H, Lq)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
