"""Wrong kernels for the flash-attn and flex APIs, one bug each (or two), for the tests of their causes.

Each is the right reference of tests/api_functions.py with one thing a kernel author gets wrong; the table at the
bottom says which cause line (attnlab.judge.causes) names it.
"""

from __future__ import annotations

import math

import torch

from tests import api_functions as R


def flash_window_swapped(q, k, v, window_size=(-1, -1), **kw):
    """window_size read as (right, left)."""
    return R.flash_attn_func(q, k, v, window_size=tuple(window_size)[::-1], **kw)


def flash_softcap_before_scale(q, k, v, softmax_scale=None, softcap=0.0, **kw):
    """The cap taken on q.k before the softmax scale: softcap * tanh(q.k / softcap) * scale."""
    if not softcap:
        return R.flash_attn_func(q, k, v, softmax_scale=softmax_scale, **kw)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    # the cap on the unscaled product equals a cap of softcap * scale on the scaled one
    return R.flash_attn_func(q, k, v, softmax_scale=scale, softcap=softcap * scale, **kw)


def flash_alibi_one_row(q, k, v, alibi_slopes=None, **kw):
    """(B, H) slopes read as the first batch element's for every batch element."""
    if alibi_slopes is not None and alibi_slopes.dim() == 2:
        alibi_slopes = alibi_slopes[0].expand_as(alibi_slopes).contiguous()
    return R.flash_attn_func(q, k, v, alibi_slopes=alibi_slopes, **kw)


def flash_dead_rows_mean(q, k, v, **kw):
    """Rows that see no key get every key alike (a large finite number in place of -inf)."""
    out, lse, p = R.flash_attn_func(q, k, v, **{**kw, "return_attn_probs": True})
    B, L, H, D = q.shape
    S = k.shape[1]
    if kw.get("causal") and L > S:  # the first L - S queries see nothing under bottom-right alignment
        G = H // k.shape[2]
        mean = v.float().mean(dim=1).repeat_interleave(G, dim=1).to(out.dtype)  # (B, H, D)
        out = out.clone()
        out[:, :L - S] = mean[:, None]
    return (out, lse, p) if kw.get("return_attn_probs") else out


def flash_top_left_dead_mean(q, k, v, **kw):
    """Two bugs: causal aligned top-left, and (where that aligns it bottom-right) dead rows as the mean of V."""
    return flash_dead_rows_mean(q, k, v, **{**kw, "_top_left": True})


def flex_mod_after_mask(query, key, value, score_mod=None, block_mask=None, **kw):
    """The score modifier applied to scores already masked to -inf (a soft-cap makes them finite again)."""
    if score_mod is None or block_mask is None:
        return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, **kw)
    B, H, L, _ = query.shape
    S = key.shape[-2]
    seen = _dense(block_mask, B, H, L, S)

    def masked_first(s, b, h, i, j):
        return score_mod(s.masked_fill(~seen, -math.inf), b, h, i, j)

    return R.flex_attention(query, key, value, score_mod=masked_first, block_mask=None, **kw)


def flash_softcap_after_mask_tiled(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                   alibi_slopes=None, return_attn_probs=False, **kw):
    """Tiles of 64 x 64: a tile any query of its block sees is loaded, masked to -inf, then capped (and ALiBi added),
    so the masked keys of a loaded tile come out at -softcap; the tiles no query sees are skipped."""
    if not softcap:
        return R.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                 alibi_slopes=alibi_slopes, return_attn_probs=return_attn_probs, **kw)
    B, L, H, D = q.shape
    S, T = k.shape[1], 64
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    seen = R.band(L, S, S - L, causal, window_size, q.device)
    tiles = torch.nn.functional.pad(seen, (0, -S % T, 0, -L % T)).unflatten(1, (-1, T)).unflatten(0, (-1, T))
    loaded = tiles.any(3).any(1).repeat_interleave(T, 0).repeat_interleave(T, 1)[:L, :S]
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    G = H // kh.shape[1]
    kh, vh = kh.repeat_interleave(G, 1), vh.repeat_interleave(G, 1)
    s = softcap * torch.tanh((qh @ kh.transpose(-2, -1) * scale).masked_fill(~seen, -math.inf) / softcap)
    bias = R._alibi(alibi_slopes, B, H, L, S, q.device, torch.float64)
    s = (s if bias is None else s + bias.double()).masked_fill(~loaded, -math.inf)
    lse = torch.logsumexp(s, -1)
    out = (torch.softmax(s, -1) @ vh).to(q.dtype).transpose(1, 2)
    lse = lse.to(torch.float64 if q.dtype == torch.float64 else torch.float32)
    return (out, lse, None) if return_attn_probs else out


def flex_full_blocks_only(query, key, value, score_mod=None, block_mask=None, **kw):
    """Only the blocks the block mask lists as full (full_kv_indices) are attended: a partial block -- one the mask
    cuts, or the ragged last one -- is left out."""
    if block_mask is None:
        return R.flex_attention(query, key, value, score_mod=score_mod, **kw)
    full = _keys_named(block_mask, block_mask.full_kv_num_blocks, block_mask.full_kv_indices, query.shape[-2],
                       key.shape[-2])

    def only_full(s, b, h, i, j):
        s = s if score_mod is None else score_mod(s, b, h, i, j)
        return s.masked_fill(~full, -math.inf)

    return R.flex_attention(query, key, value, score_mod=only_full, block_mask=None, **kw)


def _keys_named(block_mask, n, idx, L: int, S: int) -> torch.Tensor:
    """(b, h, L, S) bool: the keys of the blocks a list names -- ``idx`` (b, h, q blocks, k blocks) read to its
    counts ``n`` (b, h, q blocks), or every entry, its padding too (``n`` None)."""
    QB, KB = block_mask.BLOCK_SIZE
    read = torch.ones(idx.shape, dtype=torch.bool) if n is None else torch.arange(idx.shape[-1]) < n[..., None].long()
    hit = torch.zeros(*idx.shape[:-1], -(-S // KB) + 1, dtype=torch.bool)
    hit.scatter_(-1, torch.where(read, idx.long(), hit.shape[-1] - 1), True)
    return hit[..., :-1].repeat_interleave(QB, -2).repeat_interleave(KB, -1)[..., :L, :S]


def _dense(block_mask, B, H, L, S):
    b, h = torch.arange(B).view(B, 1, 1, 1), torch.arange(H).view(1, H, 1, 1)
    i, j = torch.arange(L).view(1, 1, L, 1), torch.arange(S).view(1, 1, 1, S)
    fn = block_mask.mask_mod
    return torch.vmap(torch.vmap(torch.vmap(torch.vmap(fn, (None, None, None, 0)), (None, None, 0, None)),
                                 (None, 0, None, None)), (0, None, None, None))(
        b.flatten(), h.flatten(), i.flatten(), j.flatten())


def flex_mod_index_swapped(query, key, value, score_mod=None, **kw):
    """score_mod called with kv_idx and q_idx swapped."""
    mod = None if score_mod is None else (lambda s, b, h, i, j: score_mod(s, b, h, j, i))
    return R.flex_attention(query, key, value, score_mod=mod, **kw)


# name -> (function, api, the cause keys that name its bugs)
BUGS = {
    "flash_window_swapped": (flash_window_swapped, "flash-attn", ("flash-window-swapped",)),
    "flash_softcap_before_scale": (flash_softcap_before_scale, "flash-attn", ("flash-softcap-scale",)),
    "flash_alibi_one_row": (flash_alibi_one_row, "flash-attn", ("flash-alibi-one-row",)),
    "flash_dead_rows_mean": (flash_dead_rows_mean, "flash-attn", ("dead-rows",)),
    "flash_top_left": (R.flash_top_left, "flash-attn", ("api-top-left",)),
    "flash_top_left_dead_mean": (flash_top_left_dead_mean, "flash-attn", ("api-top-left", "dead-rows")),
    "flash_softcap_after_mask_tiled": (flash_softcap_after_mask_tiled, "flash-attn", ("mod-after-mask",)),
    "flex_mod_after_mask": (flex_mod_after_mask, "flex", ("mod-after-mask",)),
    "flex_full_blocks_only": (flex_full_blocks_only, "flex", ("flex-full-only",)),
    "flex_mod_index_swapped": (flex_mod_index_swapped, "flex", ("flex-mod-index",)),
}


def flex_counts_ignored(query, key, value, score_mod=None, block_mask=None, **kw):
    """Every entry of kv_indices and full_kv_indices visited, the padding past the counts too: a full block named
    anywhere is wholly seen, a partial one through mask_mod."""
    return _flex_lists_read(query, key, value, score_mod, block_mask, None, None, **kw)


def flex_counts_crossed(query, key, value, score_mod=None, block_mask=None, **kw):
    """full_kv_indices read up to kv_num_blocks, the partial blocks' count, instead of its own count."""
    n = None if block_mask is None else block_mask.kv_num_blocks
    return _flex_lists_read(query, key, value, score_mod, block_mask, n, n, **kw)


def flex_full_dropped(query, key, value, score_mod=None, block_mask=None, **kw):
    """Only kv_indices' partial blocks visited: full_kv_indices is never read."""
    if block_mask is None or block_mask.full_kv_num_blocks is None:
        return R.flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, **kw)
    return _flex_lists_read(query, key, value, score_mod, block_mask, block_mask.kv_num_blocks,
                            torch.zeros_like(block_mask.full_kv_num_blocks), **kw)


def _flex_lists_read(query, key, value, score_mod, block_mask, n_part, n_full, **kw):
    """flex_attention that sees the keys of kv_indices read to ``n_part`` entries (through mask_mod) and of
    full_kv_indices read to ``n_full`` (wholly); None: every entry, the padding too."""
    if block_mask is None:
        return R.flex_attention(query, key, value, score_mod=score_mod, **kw)
    L, S = query.shape[-2], key.shape[-2]
    seen = _keys_named(block_mask, n_part, block_mask.kv_indices, L, S) & _dense(
        block_mask, *block_mask.kv_indices.shape[:2], L, S)
    if block_mask.full_kv_indices is not None:
        seen = seen | _keys_named(block_mask, n_full, block_mask.full_kv_indices, L, S)

    def visible(s, b, h, i, j):
        s = s if score_mod is None else score_mod(s, b, h, i, j)
        return s.masked_fill(~seen[b % seen.shape[0], h % seen.shape[1], i, j], -math.inf)

    return R.flex_attention(query, key, value, score_mod=visible, block_mask=None, **kw)


def flash_merge_lse_bfloat16(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """A split-KV kernel: the keys in splits of 16, each split's softmax in the compute dtype, the splits merged by
    their log-sum-exp -- each split's lse stored in bfloat16 first, whatever the inputs' dtype."""
    B, L, H, D = q.shape
    S = k.shape[1]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qt, kt, vt = (t.transpose(1, 2).to(work) for t in (q, k, v))
    G = H // kt.shape[1]
    kt, vt = kt.repeat_interleave(G, dim=1), vt.repeat_interleave(G, dim=1)
    s = qt @ kt.transpose(-2, -1) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    bias = R._alibi(alibi_slopes, B, H, L, S, q.device, work)
    s = (s if bias is None else s + bias).masked_fill(~R._flash_seen(L, S, causal, window_size, q.device), -math.inf)
    outs, parts = [], []
    for j in range(0, S, 16):
        t = s[..., j:j + 16]
        part = torch.logsumexp(t, dim=-1)
        outs.append(torch.exp(t - torch.where(torch.isinf(part), 0.0, part)[..., None]) @ vt[..., j:j + 16, :])
        parts.append(part.to(torch.bfloat16).to(work))
    ls = torch.stack(parts, dim=-1)
    top = ls.amax(dim=-1)
    top = torch.where(torch.isfinite(top), top, 0.0)
    w = torch.exp(ls - top[..., None])
    total = w.sum(dim=-1)
    out = sum(w[..., n, None] * o for n, o in enumerate(outs)) / torch.where(total > 0, total, 1.0)[..., None]
    lse = torch.where(total > 0, top + torch.log(torch.where(total > 0, total, 1.0)), -math.inf)
    out = out.transpose(1, 2).to(q.dtype)
    return (out, lse, None) if return_attn_probs else out
