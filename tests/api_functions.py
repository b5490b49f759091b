"""Attention functions written to each API verify judges, right and wrong, for the tests of attnlab.judge.apis.

The right ones follow the APIs' own documentation (FlashAttention's flash_attn_interface.py docstrings,
FlexAttention's signature), in plain PyTorch with float32 statistics, independently of the semantics the judge
writes in attnlab.judge.apis; each wrong one carries one bug a kernel author could write.
"""

from __future__ import annotations

import math

import torch


def _attend(q, k, v, scale, seen=None, bias=None, softcap=0.0, dead_lse=-math.inf):
    """q (B, H, L, D), k, v (B, Hkv, S, D) -> out (B, H, L, D), lse (B, H, L) float32. ``seen`` bool broadcasts to
    (B, H, L, S); ``bias`` float is added after the cap."""
    dt = q.dtype
    q, k, v = (t.float() if dt in (torch.float16, torch.bfloat16) else t for t in (q, k, v))
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = q @ k.transpose(-2, -1) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    if bias is not None:
        s = s + bias
    if seen is not None:
        s = s.masked_fill(~seen, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = (p @ v).to(dt)
    lse = torch.where(torch.isneginf(lse), dead_lse, lse)
    return out, lse if lse.dtype == torch.float64 else lse.float()


def _flash_seen(L, S, causal, window, device, top_left=False):
    return band(L, S, 0 if top_left else S - L, causal, window, device)


def band(L, S, offset, causal, window, device):
    """(L, S) bool: query i at key position i + offset sees key j under causal= and window_size=."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(L, device=device)[:, None] + offset
    j = torch.arange(S, device=device)[None, :]
    seen = torch.ones(L, S, dtype=torch.bool, device=device)
    if left >= 0:
        seen = seen & (j >= i - left)
    if right >= 0:
        seen = seen & (j <= i + right)
    return seen


def _alibi(slopes, B, H, L, S, device, dtype=torch.float32):
    """-slope * |i + S - L - j| in ``dtype`` (the statistics' dtype: float64 for float64 inputs)."""
    if slopes is None:
        return None
    sl = slopes.view(-1 if slopes.dim() == 2 else 1, H, 1, 1).to(dtype)
    i = torch.arange(L, device=device)[:, None] + S - L
    return -sl * (i - torch.arange(S, device=device)[None, :]).abs().to(dtype)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, _top_left=False, _dead=-math.inf):
    B, L, H, D = q.shape
    S = k.shape[1]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    seen = _flash_seen(L, S, causal, window_size, q.device, _top_left)
    bias = _alibi(alibi_slopes, B, H, L, S, q.device, torch.float64 if q.dtype == torch.float64 else torch.float32)
    out, lse = _attend(*(t.transpose(1, 2) for t in (q, k, v)), scale, seen, bias,
                       softcap, _dead)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def flash_top_left(q, k, v, **kw):
    """Wrong: causal aligned top-left, as PyTorch's is_causal."""
    return flash_attn_func(q, k, v, **kw, _top_left=True)


def flash_dead_rows_plus_inf(q, k, v, **kw):
    """Right: FlashAttention 2's CUDA kernel writes +inf as the lse of a row that sees no key."""
    return flash_attn_func(q, k, v, **kw, _dead=math.inf)


def flash_lse_base2(q, k, v, **kw):
    """Wrong: the log-sum-exp in base 2 (a kernel's exp2 trick left in the returned statistic)."""
    out, lse, p = flash_attn_func(q, k, v, **kw)
    return out, lse / math.log(2), p


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, _shift=0):
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        qs = q[cq[b]:cq[b + 1]][None]
        ks = k[max(0, ck[b] - _shift):max(0, ck[b + 1] - _shift)][None]
        vs = v[max(0, ck[b] - _shift):max(0, ck[b + 1] - _shift)][None]
        sl = alibi_slopes[b:b + 1] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        out, lse, _ = flash_attn_func(qs, ks, vs, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                      softcap=softcap, alibi_slopes=sl, return_attn_probs=True)  # ((B, H): its row)
        outs.append(out[0])
        lses.append(lse[0])
    out, lse = torch.cat(outs), torch.cat(lses, dim=-1)  # (total_q, H, D), (H, total_q)
    return (out, lse, None) if return_attn_probs else out


def varlen_shifted(*args, **kw):
    """Wrong: each sequence's keys read one row early (an off-by-one in cu_seqlens_k)."""
    return flash_attn_varlen_func(*args, **kw, _shift=1)


def paged_decode(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None,
                 causal=False, window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, _pages=True):
    """flash_attn_with_kvcache over a paged cache: k, v (B, seqlen_new, Hkv, D) written into the cache at positions
    cache_seqlens[b] ... first, then each sequence's Lq queries attend its cache_seqlens[b] + seqlen_new keys,
    causal and the window aligned bottom-right."""
    B, Lq, H, D = q.shape
    bs = k_cache.shape[1]
    table = block_table.long() if _pages else torch.arange(block_table.numel()).view(block_table.shape)
    lens = cache_seqlens.long()
    if k is not None:
        for b in range(B):
            for t in range(k.shape[1]):
                j = int(lens[b]) + t
                k_cache[table[b, j // bs], j % bs] = k[b, t]
                v_cache[table[b, j // bs], j % bs] = v[b, t]
        lens = lens + k.shape[1]
    kk = k_cache[table].flatten(1, 2).transpose(1, 2)  # (B, Hkv, max_blocks * bs, D)
    vv = v_cache[table].flatten(1, 2).transpose(1, 2)
    j = torch.arange(kk.shape[2], device=q.device)[None, None, :]
    pos = torch.arange(Lq, device=q.device)[None, :, None] + (lens - Lq)[:, None, None]  # (B, Lq, 1)
    seen = j < lens[:, None, None]
    left, right = window_size
    if causal:
        right = 0
    if left >= 0:
        seen = seen & (j >= pos - left)
    if right >= 0:
        seen = seen & (j <= pos + right)
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    out, lse = _attend(q.transpose(1, 2), kk, vv, scale, seen[:, None], softcap=softcap)
    out = out.transpose(1, 2)  # (B, Lq, H, D)
    return (out, lse) if return_softmax_lse else out


def paged_in_order(q, k_cache, v_cache, **kw):
    """Wrong: reads pages 0, 1, 2, ... in order instead of looking them up in block_table."""
    return paged_decode(q, k_cache, v_cache, **kw, _pages=False)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, _ignore_mask=False):
    B, H, L, E = query.shape
    S = key.shape[-2]
    sc = E ** -0.5 if scale is None else scale
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    i, j = torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S)
    seen = None
    if block_mask is not None and not _ignore_mask:
        seen = torch.vmap(torch.vmap(torch.vmap(torch.vmap(block_mask.mask_mod, (None, None, None, 0)),
                                                (None, None, 0, None)), (None, 0, None, None)), (0, None, None, None))(
            b.flatten(), h.flatten(), i.flatten(), j.flatten())
    dt = query.dtype
    q, k, v = (t.float() if dt in (torch.float16, torch.bfloat16) else t for t in (query, key, value))
    G = H // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)
    s = q @ k.transpose(-2, -1) * sc
    if score_mod is not None:
        s = score_mod(s, b, h, i, j)
    if seen is not None:
        s = s.masked_fill(~seen, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    out = (p @ v).to(dt)
    return (out, lse.float() if dt != torch.float64 else lse) if return_lse else out


def flex_ignores_block_mask(query, key, value, **kw):
    """Wrong: the block_mask is never applied."""
    return flex_attention(query, key, value, **kw, _ignore_mask=True)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Right: SDPA's own API, PyTorch's F.scaled_dot_product_attention as it is (what verify's speed is measured on)."""
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                                            dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                                            enable_gqa=enable_gqa)
