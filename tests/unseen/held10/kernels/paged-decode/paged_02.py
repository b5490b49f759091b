TRUTH = {'api': 'paged-decode', 'bugs': ['The head map divides by Hkv instead of the group size H // Hkv; shows (wrong kv heads or an index error) on every case where H // Hkv != Hkv, including plain multi-head cases with H == Hkv > 1.', 'Every page is read in full (n = block_size), so stale slots past the sequence end in the last page are attended; shows on non-causal cases whose length is not a multiple of block_size.'], 'kind': 'two'}
import math
import torch


def _append(cache, new, cache_seqlens, block_table):
    nb, bs = cache.shape[0], cache.shape[1]
    flat = cache.view(nb * bs, *cache.shape[2:])
    for b in range(new.shape[0]):
        n0 = int(cache_seqlens[b])
        pos = torch.arange(n0, n0 + new.shape[1])
        slots = block_table[b].long()[pos // bs] * bs + pos % bs
        flat[slots] = new[b].to(cache.dtype)


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    bs, Hkv = k_cache.shape[1], k_cache.shape[2]
    cdt = torch.float32 if q.dtype == torch.bfloat16 else q.dtype
    sc = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    n_new = 0
    if k is not None:
        _append(k_cache, k, cache_seqlens, block_table)
        _append(v_cache, v, cache_seqlens, block_table)
        n_new = k.shape[1]
    head_map = torch.arange(H) // Hkv
    left, right = window_size
    if causal:
        right = 0
    outs, lses = [], []
    for b in range(B):
        Sb = int(cache_seqlens[b]) + n_new
        qh = q[b].to(cdt).transpose(0, 1)
        qpos = torch.arange(Lq)[:, None] + (Sb - Lq)
        m = torch.full((H, Lq, 1), -math.inf, dtype=cdt)
        l = torch.zeros((H, Lq, 1), dtype=cdt)
        acc = torch.zeros((H, Lq, v_cache.shape[-1]), dtype=cdt)
        for pi in range((Sb + bs - 1) // bs):
            blk = int(block_table[b, pi])
            n = bs
            kp = k_cache[blk, :n].to(cdt).index_select(1, head_map)
            vp = v_cache[blk, :n].to(cdt).index_select(1, head_map)
            s = torch.einsum('hld,shd->hls', qh, kp) * sc
            if softcap > 0:
                s = softcap * torch.tanh(s / softcap)
            kpos = torch.arange(pi * bs, pi * bs + n)[None, :]
            keep = torch.ones(Lq, n, dtype=torch.bool)
            if left >= 0:
                keep = keep & (kpos >= qpos - left)
            if right >= 0:
                keep = keep & (kpos <= qpos + right)
            s = s.masked_fill(~keep, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_use = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_use)
            p = torch.exp(s - m_use)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + torch.einsum('hls,shd->hld', p, vp)
            m = m_new
        o = acc / torch.where(l > 0, l, torch.ones_like(l))
        outs.append(o.transpose(0, 1))
        lses.append(torch.where(l > 0, m + torch.log(l), torch.full_like(l, -math.inf)).squeeze(-1))
    out = torch.stack(outs).to(q.dtype)
    lse = torch.stack(lses)
    if return_softmax_lse:
        return out, lse
    return out
