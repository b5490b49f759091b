TRUTH = {'api': 'paged-decode', 'bugs': ['the bottom-right offset is clamped at zero (max(S_b - Lq, 0)), so when Lq > S_b the first Lq - S_b queries, which must see no key (zeros, lse -inf), are aligned top-left and attend to keys (Lq>S_causal_append)', 'only the left window bound and `causal` are applied; a finite right window with causal=False is ignored, so queries also attend keys more than `right` positions after their diagonal (noncausal_Lq4_append_window)'], 'kind': 'two'}
import math

import torch


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    block_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    rep = H // Hkv
    sm_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    seqlen_new = 0 if k is None else k.shape[1]
    win_left = window_size[0]

    out = torch.zeros(B, Lq, H, D, dtype=acc_t)
    lse = torch.full((B, H, Lq), float('-inf'), dtype=acc_t)
    for b in range(B):
        cached = int(cache_seqlens[b])
        for t in range(seqlen_new):
            p = cached + t
            page = int(block_table[b, p // block_size])
            k_cache[page, p % block_size] = k[b, t]
            v_cache[page, p % block_size] = v[b, t]
        S = cached + seqlen_new
        qb = q[b].to(acc_t).transpose(0, 1)
        q_pos = (torch.arange(Lq) + max(S - Lq, 0)).view(-1, 1)

        m = torch.full((H, Lq, 1), float('-inf'), dtype=acc_t)
        l = torch.zeros(H, Lq, 1, dtype=acc_t)
        acc = torch.zeros(H, Lq, D, dtype=acc_t)
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            page = int(block_table[b, j0 // block_size])
            kp = k_cache[page, :j1 - j0].to(acc_t).transpose(0, 1).repeat_interleave(rep, 0)
            vp = v_cache[page, :j1 - j0].to(acc_t).transpose(0, 1).repeat_interleave(rep, 0)
            s = torch.matmul(qb, kp.transpose(1, 2)) * sm_scale
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            k_pos = torch.arange(j0, j1).view(1, -1)
            hide = torch.zeros(Lq, j1 - j0, dtype=torch.bool)
            if causal:
                hide |= k_pos > q_pos
            if win_left >= 0:
                hide |= k_pos < q_pos - win_left
            s = s.masked_fill(hide, float('-inf'))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            ref = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            r = torch.exp(m - ref)
            e = torch.exp(s - ref)
            l = l * r + e.sum(-1, keepdim=True)
            acc = acc * r + torch.matmul(e, vp)
            m = m_new
        out[b] = (acc / torch.where(l > 0, l, torch.ones_like(l))).transpose(0, 1)
        ref = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
        lse[b] = (ref + torch.log(l)).squeeze(-1)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, lse
    return out
