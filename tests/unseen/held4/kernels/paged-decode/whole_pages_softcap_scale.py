import math

import torch

TRUTH = {"api": "paged-decode", "bugs": ["Without causal or a right window the key loop runs to the end of the last page (ceil(S_b / block_size) * block_size) and nothing masks positions >= S_b, so the garbage slots past the sequence's length in its last page are attended.", "The softcap is computed as softcap * tanh(s) instead of softcap * tanh(s / softcap); wrong for every softcap other than 1."], "kind": "two"}

PAGES_PER_SPLIT = 2


def _append_to_cache(k_cache, v_cache, k, v, cache_seqlens, block_table):
    page_size = k_cache.shape[1]
    for b in range(k.shape[0]):
        pos = torch.arange(k.shape[1], device=k.device) + int(cache_seqlens[b])
        pages = block_table[b, pos // page_size].long()
        slots = pos % page_size
        k_cache[pages, slots] = k[b].to(k_cache.dtype)
        v_cache[pages, slots] = v[b].to(v_cache.dtype)


def _split_partial(qb, k_cache, v_cache, pages_b, j0, j1, pos, kv_head, scale, softcap, left, right, acc_t):
    """Attention of the queries (H, Lq, D) over keys [j0, j1) of one sequence: returns (o, lse) of that split."""
    page_size = k_cache.shape[1]
    H, Lq, _ = qb.shape
    if j1 <= j0:
        return (torch.zeros(H, Lq, v_cache.shape[-1], dtype=acc_t, device=qb.device),
                torch.full((H, Lq), -math.inf, dtype=acc_t, device=qb.device))
    j = torch.arange(j0, j1, device=qb.device)
    phys = pages_b[j // page_size].long()
    kk = k_cache[phys, j % page_size].to(acc_t).permute(1, 0, 2)[kv_head]     # (H, n, D)
    vv = v_cache[phys, j % page_size].to(acc_t).permute(1, 0, 2)[kv_head]
    s = torch.matmul(qb, kk.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s)
    rel = pos[:, None] - j[None, :]
    masked = torch.zeros_like(rel, dtype=torch.bool)
    if left >= 0:
        masked |= rel > left
    if right >= 0:
        masked |= rel < -right
    s = s.masked_fill(masked, -math.inf)
    m = s.amax(-1)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_safe[..., None])
    l = p.sum(-1)
    has = l > 0
    l_safe = torch.where(has, l, torch.ones_like(l))
    o = torch.matmul(p, vv) / l_safe[..., None]
    lse = torch.where(has, m_safe + torch.log(l_safe), torch.full_like(l, -math.inf))
    return o, lse


def _combine(parts):
    o = torch.stack([p[0] for p in parts])            # (splits, H, Lq, D)
    lse = torch.stack([p[1] for p in parts])          # (splits, H, Lq)
    lse_max = lse.amax(0)
    lse_max_safe = torch.where(torch.isfinite(lse_max), lse_max, torch.zeros_like(lse_max))
    w = torch.exp(lse - lse_max_safe)
    tot = w.sum(0)
    has = tot > 0
    tot_safe = torch.where(has, tot, torch.ones_like(tot))
    out = (w[..., None] * o).sum(0) / tot_safe[..., None]
    return out, torch.where(has, lse_max_safe + torch.log(tot_safe), torch.full_like(tot, -math.inf))


def kernel(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
           causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False):
    B, Lq, H, D = q.shape
    page_size, Hkv = k_cache.shape[1], k_cache.shape[2]
    acc_t = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    new = 0 if k is None else k.shape[1]
    if block_table is None:
        block_table = torch.arange(B, dtype=torch.int32, device=q.device)[:, None]
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), block_table.shape[1] * page_size - new, dtype=torch.int32, device=q.device)
    if k is not None:
        _append_to_cache(k_cache, v_cache, k, v, cache_seqlens, block_table)
    left, right = int(window_size[0]), int(window_size[1])
    if causal:
        right = 0
    kv_head = torch.arange(H, device=q.device) // (H // Hkv)
    out = torch.empty(B, Lq, H, v_cache.shape[-1], dtype=q.dtype, device=q.device)
    lse_out = torch.empty(B, H, Lq, dtype=torch.float32, device=q.device)
    split_len = PAGES_PER_SPLIT * page_size
    for b in range(B):
        seqlen = int(cache_seqlens[b]) + new
        pos = torch.arange(Lq, device=q.device) + (seqlen - Lq)
        lo = 0 if left < 0 else max(0, seqlen - Lq - left)
        hi = -(-seqlen // page_size) * page_size if right < 0 else max(0, min(seqlen, seqlen - 1 + right + 1))
        qb = q[b].to(acc_t).transpose(0, 1)                                  # (H, Lq, D)
        first = (lo // split_len) * split_len
        parts = []
        for j0 in range(first, max(hi, first + 1), split_len):
            j1 = min(j0 + split_len, hi)
            parts.append(_split_partial(qb, k_cache, v_cache, block_table[b], max(j0, lo), j1, pos, kv_head,
                                        scale, softcap, left, right, acc_t))
        o, lse = _combine(parts)
        out[b] = o.transpose(0, 1).to(q.dtype)
        lse_out[b] = lse.float()
    if return_softmax_lse:
        return out, lse_out
    return out
