TRUTH = {'api': 'paged-decode',
 'bugs': ["each page's partial lse is kept in bfloat16 before the split-KV merge, so merge weights and the final "
          'lse carry up to ~1e-2 absolute error (out and lse fail for float32/float64 inputs in every case; bf16 '
          'lse fails in some multi-page cases)'],
 'kind': 'precision'}

import math
import torch


def _merge(o_parts, l_parts):
    ls = torch.stack(l_parts, dim=0).to(o_parts[0].dtype)
    os_ = torch.stack(o_parts, dim=0)
    lmax = ls.amax(dim=0)
    lmax_use = torch.where(torch.isinf(lmax), torch.zeros_like(lmax), lmax)
    w = torch.exp(ls - lmax_use)
    tot = w.sum(dim=0)
    tot_use = torch.where(tot > 0, tot, torch.ones_like(tot))
    out = (os_ * (w / tot_use).unsqueeze(-1)).sum(dim=0)
    lse = torch.where(tot > 0, lmax_use + torch.log(tot_use), torch.full_like(tot, -math.inf))
    return out, lse


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    dt = q.dtype
    cd = torch.float64 if dt == torch.float64 else torch.float32
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    g = H // Hkv
    Dv = v_cache.shape[-1]
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    seqlens = cache_seqlens.long()
    if k is not None:
        new = k.shape[1]
        pos = seqlens.view(B, 1) + torch.arange(new).view(1, new)
        pages = torch.gather(block_table.long(), 1, pos // bs)
        k_cache[pages, pos % bs] = k
        v_cache[pages, pos % bs] = v
        seqlens = seqlens + new
    qg = q.to(cd).reshape(B, Lq, Hkv, g, D).permute(0, 2, 3, 1, 4)
    out = torch.zeros(B, Lq, H, Dv, dtype=cd)
    lse = torch.full((B, H, Lq), -math.inf, dtype=cd)
    for b in range(B):
        S = int(seqlens[b])
        if S == 0:
            continue
        qpos = torch.arange(Lq).view(Lq, 1) + (S - Lq)
        o_parts, l_parts = [], []
        for i in range((S + bs - 1) // bs):
            page = int(block_table[b, i])
            n = min(bs, S - i * bs)
            kp = k_cache[page, :n].to(cd).permute(1, 0, 2).unsqueeze(1)
            vp = v_cache[page, :n].to(cd).permute(1, 0, 2).unsqueeze(1)
            s = torch.matmul(qg[b], kp.transpose(-1, -2)) * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(i * bs, i * bs + n).view(1, n)
            ok = torch.ones(Lq, n, dtype=torch.bool)
            if left >= 0:
                ok = ok & (kpos >= qpos - left)
            if right >= 0:
                ok = ok & (kpos <= qpos + right)
            s = s.masked_fill(~ok, -math.inf)
            m = s.amax(dim=-1, keepdim=True)
            m_use = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            e = torch.exp(s - m_use)
            den = e.sum(dim=-1, keepdim=True)
            den_use = torch.where(den > 0, den, torch.ones_like(den))
            o_parts.append(torch.matmul(e, vp) / den_use)
            l_parts.append(torch.where(den > 0, m_use + torch.log(den_use), torch.full_like(den, -math.inf)).squeeze(-1).to(torch.bfloat16))
        o, l = _merge(o_parts, l_parts)
        out[b] = o.reshape(H, Lq, Dv).transpose(0, 1)
        lse[b] = l.reshape(H, Lq)
    out = out.to(dt)
    if return_softmax_lse:
        return out, lse if cd == torch.float64 else lse.float()
    return out
