TRUTH = {'api': 'paged-decode',
 'bugs': ['query positions are aligned to the old cache length (cache_seqlens - Lq) instead of cache_seqlens + '
          'seqlen_new - Lq; with new keys and causal/window the queries see too few keys '
          '(spec4_causal_append_gqa, append_cross_page, Lq>S_causal_append, noncausal_Lq4_append_window)'],
 'kind': 'semantic'}

import math
import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    nblk, bs, Hkv = k_cache.shape[0], k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    kflat = k_cache.view(nblk * bs, Hkv, D)
    vflat = v_cache.view(nblk * bs, Hkv, v_cache.shape[-1])
    lens = cache_seqlens.long().clone()
    bt = block_table.long()
    if k is not None:
        for t in range(k.shape[1]):
            p = lens + t
            slot = bt[torch.arange(B), p // bs] * bs + p % bs
            kflat[slot] = k[:, t]
            vflat[slot] = v[:, t]
        lens = lens + k.shape[1]
    Smax = max(int(lens.max()), 1)
    kpos = torch.arange(Smax)
    slots = bt[:, kpos // bs] * bs + kpos % bs
    kk = kflat[slots].to(cd)
    vv = vflat[slots].to(cd)
    qh = q.to(cd).permute(0, 2, 1, 3)
    kh = kk.permute(0, 2, 1, 3)[:, torch.arange(H) // g]
    vh = vv.permute(0, 2, 1, 3)[:, torch.arange(H) // g]
    s = torch.matmul(qh, kh.transpose(-1, -2)) * sc
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    qp = torch.arange(Lq).view(1, Lq, 1) + (cache_seqlens.long().view(B, 1, 1) - Lq)
    kp = kpos.view(1, 1, Smax)
    ok = kp < lens.view(B, 1, 1)
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        ok = ok & (kp >= qp - left)
    if right >= 0:
        ok = ok & (kp <= qp + right)
    ok = ok.unsqueeze(1)
    s = s.masked_fill(~ok, -math.inf)
    seen = ok.any(dim=-1)
    s = torch.where(seen.unsqueeze(-1), s, torch.zeros_like(s))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)) * seen.unsqueeze(-1)
    out = torch.matmul(p, vh).permute(0, 2, 1, 3).to(dt)
    lse = torch.where(seen, lse, torch.full_like(lse, -math.inf))
    if return_softmax_lse:
        return out, lse
    return out
