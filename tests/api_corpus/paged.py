"""Attention over a paged KV cache, flash_attn_with_kvcache's API: the keys of sequence b live in fixed-size pages of
k_cache (num_blocks, block_size, Hkv, D), listed in order by block_table[b]; key position p is slot p % block_size
of page block_table[b, p // block_size], and the first cache_seqlens[b] positions are valid.

New keys k, v (B, Lnew, Hkv, D), when given, are written at positions cache_seqlens[b] .. + Lnew - 1 first, and the
Lq queries of a sequence then attend its n = cache_seqlens[b] + Lnew keys, query i sitting at key i + n - Lq (causal
and the window bottom-right). The kernels here write the new keys into copies of the caches, so the caller's
tensors are never changed. Two kernels: a page walker (the online softmax page by page, as the split-KV decode
kernels run) and a gather (every position's page looked up at once, one softmax, as vLLM's reference does).
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import (
    compute_dtype,
    dense_softmax,
    kv_head_index,
    online_finish,
    online_init,
    online_step,
)
from tests.api_corpus.flash import key_range, tile_keep, window_of


def append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table, at=None):
    """Copies of the caches with k, v (B, Lnew, Hkv, D) written at positions at(b) + t (default cache_seqlens[b])."""
    if k is None:
        return k_cache, v_cache
    kc, vc = k_cache.clone(), v_cache.clone()
    bs = k_cache.shape[1]
    for b in range(k.shape[0]):
        start = int(cache_seqlens[b]) if at is None else at(b)
        for t in range(k.shape[1]):
            pos = start + t
            page = int(block_table[b, pos // bs])
            kc[page, pos % bs] = k[b, t]
            vc[page, pos % bs] = v[b, t]
    return kc, vc


def cap(s, scale, softcap):
    """The scaled score, soft-capped: cap * tanh(scale * qk / cap)."""
    s = s * scale
    return softcap * torch.tanh(s / softcap) if softcap > 0 else s


def page_walk(q, kc, vc, block_table, lengths, scale, softcap, left, right, page_of=None, slots_of=None,
              offset_of=None, score=cap):
    """For each sequence, the online softmax over the pages its queries' window touches. page_of(b, p) is the page
    of logical page p (default block_table[b, p]), slots_of(p, n) the key positions of page p (default cut at n),
    offset_of(n, Lq) where query 0 sits (default n - Lq), score(qk, scale, softcap) the scoring (cap).
    Returns out (B, H, Lq, D) and lse (B, H, Lq) in the compute dtype."""
    B, Lq, H, D = q.shape
    bs = kc.shape[1]
    dt = compute_dtype(q.dtype)
    kvh = kv_head_index(H, kc.shape[2]).to(q.device)
    outs, lses = [], []
    for b in range(B):
        n = lengths[b]
        off = n - Lq if offset_of is None else offset_of(n, Lq)
        rows = torch.arange(Lq, device=q.device) + off
        qb = q[b].transpose(0, 1).to(dt)  # (H, Lq, D)
        m, l, acc = online_init((H, Lq), vc.shape[-1], dt, q.device)
        lo, hi = key_range(0, Lq, off, n, left, right)
        for p in range(lo // bs, -(-hi // bs)):
            page = int(block_table[b, p]) if page_of is None else page_of(b, p)
            cols = (torch.arange(p * bs, min(n, (p + 1) * bs), device=q.device) if slots_of is None
                    else slots_of(p, n))
            kt = kc[page, cols - p * bs].to(dt).transpose(0, 1).index_select(0, kvh)  # (H, slots, D)
            vt = vc[page, cols - p * bs].to(dt).transpose(0, 1).index_select(0, kvh)
            s = score(qb @ kt.transpose(-2, -1), scale, softcap)
            s = s.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
            m, l, acc = online_step(m, l, acc, s, vt)
        out, lse = online_finish(m, l, acc)
        outs.append(out)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def paged_finish(q, out, lse, return_softmax_lse):
    """(B, H, Lq, D) -> (B, Lq, H, D) in q's dtype; lse float32 (float64 for float64)."""
    out = out.transpose(1, 2).to(q.dtype)
    lse = lse if lse.dtype == torch.float64 else lse.float()
    return (out, lse) if return_softmax_lse else out


def paged_pages(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Right: the new keys appended, then page by page under an online softmax, float32 statistics."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    kc, vc = append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
    lengths = [int(n) + (0 if k is None else k.shape[1]) for n in cache_seqlens]
    left, right = window_of(causal, window_size)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, left, right)
    return paged_finish(q, out, lse, return_softmax_lse)


def gather_scores(q, kc, vc, block_table, lengths, scale, softcap, left, right, page_index=None, bound=True,
                  dot_dtype=None):
    """Every position of every sequence looked up at once: K, V (B, H, P, D) for the P = max_blocks * block_size
    positions the table spans, and the scores (B, H, Lq, P), -inf past each length and outside the window.
    page_index(pos) is a position's table column (default pos // block_size); bound=False drops the length;
    dot_dtype is the dtype q.K^T is taken in (default the compute dtype)."""
    B, Lq, H, D = q.shape
    bs = kc.shape[1]
    dt = compute_dtype(q.dtype)
    pos = torch.arange(block_table.shape[1] * bs, device=q.device)
    col = pos // bs if page_index is None else page_index(pos)
    pages = block_table.long()[:, col]  # (B, P)
    kvh = kv_head_index(H, kc.shape[2]).to(q.device)
    K = kc[pages, pos % bs].to(dt).permute(0, 2, 1, 3).index_select(1, kvh)  # (B, H, P, D)
    V = vc[pages, pos % bs].to(dt).permute(0, 2, 1, 3).index_select(1, kvh)
    n = torch.tensor(lengths, device=q.device) if bound else torch.full((B,), pos.numel(), device=q.device)
    rows = torch.arange(Lq, device=q.device)[None, :] + (n - Lq)[:, None]  # (B, Lq)
    keep = torch.stack([tile_keep(rows[b], pos, left, right) for b in range(B)])[:, None]  # (B, 1, Lq, P)
    keep = keep & (pos[None, None, None, :] < n[:, None, None, None])
    dd = dt if dot_dtype is None else dot_dtype
    s = cap((q.transpose(1, 2).to(dd) @ K.to(dd).transpose(-2, -1)).to(dt), scale, softcap)
    return s.masked_fill(~keep, -math.inf), V


def paged_gather(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                 return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Right: the new keys appended, every position's page gathered at once, one softmax."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    kc, vc = append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
    lengths = [int(n) + (0 if k is None else k.shape[1]) for n in cache_seqlens]
    s, V = gather_scores(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size))
    p, lse = dense_softmax(s)
    return paged_finish(q, p @ V, lse, return_softmax_lse)
