"""flash_attn_with_kvcache on a paged KV cache: in-place append through the block table, then a split-by-page
online-softmax decode (one page of keys at a time, running max / sum per query row)."""
import math

import torch

TRUTH = {
    'api': 'paged-decode',
    'bugs': [
        "The new keys/values are written into clones of k_cache/v_cache (k_cache = k_cache.clone() before the append) instead of the caller's tensors: attention over the appended keys is right, but the caller's cache is not updated in place. k_cache/v_cache wrong in every append case.",
        'softcap drops the inner division: softcap * tanh(s) instead of softcap * tanh(s / softcap). out and lse wrong in softcap cases only.',
    ],
    'kind': 'two',
}

NEG_INF = float('-inf')


def _append(k_cache, v_cache, k, v, cache_seqlens, block_table):
    """Write the new keys/values of each sequence into its pages, in place."""
    bs = k_cache.shape[1]
    n_new = k.shape[1]
    for b in range(k.shape[0]):
        pos = int(cache_seqlens[b]) + torch.arange(n_new)
        blocks = block_table[b].long()[pos // bs]
        slots = pos % bs
        k_cache[blocks, slots] = k[b].to(k_cache.dtype)
        v_cache[blocks, slots] = v[b].to(v_cache.dtype)


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    nblk, bs, Hkv, _ = k_cache.shape
    group = H // Hkv
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    wd = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_new = 0
    if k is not None:
        k_cache, v_cache = k_cache.clone(), v_cache.clone()
        _append(k_cache, v_cache, k, v, cache_seqlens, block_table)
        n_new = k.shape[1]
    left, right = window_size
    if causal:
        right = 0
    out = torch.zeros(B, Lq, H, v_cache.shape[-1], dtype=wd)
    lse = torch.full((B, H, Lq), NEG_INF, dtype=wd)
    for b in range(B):
        S = int(cache_seqlens[b]) + n_new
        # (Hkv, group, Lq, D): query head h = kv_head * group + g
        qb = q[b].to(wd).permute(1, 0, 2).reshape(Hkv, group, Lq, D)
        rows = torch.arange(Lq)[:, None] + (S - Lq)
        m = torch.full((Hkv, group, Lq, 1), NEG_INF, dtype=wd)
        l = torch.zeros(Hkv, group, Lq, 1, dtype=wd)
        acc = torch.zeros(Hkv, group, Lq, v_cache.shape[-1], dtype=wd)
        n_pages = (S + bs - 1) // bs
        for pi in range(n_pages):
            blk = int(block_table[b, pi])
            p0 = pi * bs
            n = min(bs, S - p0)
            kp = k_cache[blk, :n].to(wd).permute(1, 0, 2)  # (Hkv, n, D)
            vp = v_cache[blk, :n].to(wd).permute(1, 0, 2)
            s = torch.matmul(qb, kp[:, None].transpose(-1, -2)) * scale  # (Hkv, group, Lq, n)
            if softcap > 0:
                s = softcap * torch.tanh(s)
            cols = torch.arange(p0, p0 + n)[None, :]
            ok = torch.ones(Lq, n, dtype=torch.bool)
            if left >= 0:
                ok &= cols >= rows - left
            if right >= 0:
                ok &= cols <= rows + right
            s = s.masked_fill(~ok, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_ref = torch.where(m_new == NEG_INF, torch.zeros_like(m_new), m_new)
            p = torch.exp(s - m_ref)
            a = torch.exp(m - m_ref)
            l = l * a + p.sum(-1, keepdim=True)
            acc = acc * a + torch.matmul(p, vp[:, None])
            m = m_new
        seen = l > 0
        l1 = torch.where(seen, l, torch.ones_like(l))
        o = torch.where(seen, acc / l1, torch.zeros_like(acc))  # (Hkv, group, Lq, Dv)
        out[b] = o.reshape(H, Lq, -1).permute(1, 0, 2)
        lse[b] = torch.where(seen, m + torch.log(l1), torch.full_like(m, NEG_INF)).reshape(H, Lq)
    out = out.to(q.dtype)
    if return_softmax_lse:
        return out, (lse if q.dtype == torch.float64 else lse.float())
    return out
