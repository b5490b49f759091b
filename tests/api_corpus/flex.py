"""flex_attention as its Triton kernel walks a BlockMask: per query block, the partial key blocks (the mask_mod is
evaluated inside them) and the full key blocks (it is not), every score first through score_mod.

A BlockMask cuts queries and keys into blocks of BLOCK_SIZE = (Q_BLOCK, KV_BLOCK). For each (batch, head, query
block) it lists the key blocks with some visible key: kv_num_blocks of them in kv_indices are partial,
full_kv_num_blocks in full_kv_indices are wholly visible. Its batch and head dims may be 1 (the mask is the same for
all). A key block past the last key is cut at S. The score is scale * q.k, then score_mod(score, b, h, q_idx, kv_idx)
with h the query head, then -inf where mask_mod says no. A row that sees no key is 0, its lse -inf.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import compute_dtype, kv_head_index, online_finish, online_init, online_step

DEFAULT_BLOCK = 128


def on_index(fn, *idx):
    """fn(b, h, q_idx, kv_idx) at every combination of four index vectors, one index at a time (torch.vmap), as
    FlexAttention calls a mask_mod. Returns (len(b), len(h), len(q_idx), len(kv_idx))."""
    f = fn
    for dim in (3, 2, 1, 0):
        f = torch.vmap(f, in_dims=tuple(0 if d == dim else None for d in range(4)))
    return f(*idx)


def grids(b, h, i, j):
    """Index vectors as broadcasting grids (Bt, 1, 1, 1), (1, Ht, 1, 1), (1, 1, Lt, 1), (1, 1, 1, St)."""
    return b.view(-1, 1, 1, 1), h.view(1, -1, 1, 1), i.view(1, 1, -1, 1), j.view(1, 1, 1, -1)


def flex_heads(query, key, value, enable_gqa):
    """The compute dtype's q, and k, v gathered to the query heads (FlexAttention refuses H != Hkv without
    enable_gqa)."""
    H, Hkv = query.shape[1], key.shape[1]
    if not enable_gqa and Hkv != H:
        raise ValueError(f"query has {H} heads and key {Hkv}: pass enable_gqa=True")
    dt = compute_dtype(query.dtype)
    kvh = kv_head_index(H, Hkv).to(query.device)
    return query.to(dt), key.to(dt).index_select(1, kvh), value.to(dt).index_select(1, kvh)


def block_lists(block_mask, B, H, L, S):
    """(Q_BLOCK, KV_BLOCK) and, for each (batch slot, head slot) of the mask, per query block the partial and the
    full key blocks as Python lists. No mask: every key block full, blocks of 128."""
    if block_mask is None:
        n_kv = -(-S // DEFAULT_BLOCK)
        return (DEFAULT_BLOCK, DEFAULT_BLOCK), {(0, 0): [([], list(range(n_kv)))] * -(-L // DEFAULT_BLOCK)}
    num, idx = block_mask.kv_num_blocks, block_mask.kv_indices
    fnum, fidx = block_mask.full_kv_num_blocks, block_mask.full_kv_indices
    lists = {}
    for bm in range(num.shape[0]):
        for hm in range(num.shape[1]):
            lists[bm, hm] = [(idx[bm, hm, m, :num[bm, hm, m]].tolist(),
                              [] if fnum is None else fidx[bm, hm, m, :fnum[bm, hm, m]].tolist())
                             for m in range(num.shape[2])]
    return tuple(block_mask.BLOCK_SIZE), lists


def slot_range(slot: int, n_slots: int, n: int, device):
    """The batches (or heads) a mask slot covers: all of them where the mask's dim is 1."""
    return torch.arange(n, device=device) if n_slots == 1 else torch.tensor([slot], device=device)


def flex_finish(query, out, lse, return_lse):
    out = out.to(query.dtype)
    lse = lse if lse.dtype == torch.float64 else lse.float()
    return (out, lse) if return_lse else out


def cut_at_s(n: int, KB: int, S: int, full: bool, device):
    """Key block n's keys, bounds-checked: the last block cut at S (a block past S is empty)."""
    return torch.arange(min(S, n * KB), min(S, (n + 1) * KB), device=device)


def flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=None, kv_block=None,
              blocks=block_lists, key_cols=cut_at_s, finish=online_finish):
    """The kernel's walk. Its parts, each replaceable: tile_scores(s, b, h, i, j, full, mask_mod, score_mod) makes a
    tile's final scores (default right_tile), kv_block overrides the mask's key block size, blocks(...) lists the
    key blocks (block_lists), key_cols(n, KB, S, full, device) a block's keys (cut_at_s), finish(m, l, acc) ends a
    query block (online_finish). Returns out (B, H, L, Ev) and lse (B, H, L) in the compute dtype."""
    B, H, L, E = query.shape
    S = key.shape[2]
    sc = E ** -0.5 if scale is None else scale
    q, k, v = flex_heads(query, key, value, enable_gqa)
    (QB, KB), lists = blocks(block_mask, B, H, L, S)
    KB = KB if kv_block is None else kv_block
    n_b, n_h = (1, 1) if block_mask is None else block_mask.kv_num_blocks.shape[:2]
    tile_scores = tile_scores or right_tile
    out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, L), -math.inf, dtype=q.dtype, device=q.device)
    for (bm, hm), per_block in lists.items():
        b, h = slot_range(bm, n_b, B, q.device), slot_range(hm, n_h, H, q.device)
        qs, ks, vs = (t[b][:, h] for t in (q, k, v))
        for m, (partial, full) in enumerate(per_block):
            i = torch.arange(m * QB, min(L, (m + 1) * QB), device=q.device)
            st = online_init((len(b), len(h), len(i)), v.shape[-1], q.dtype, q.device)
            for n, is_full in [(n, False) for n in partial] + [(n, True) for n in full]:
                j = key_cols(n, KB, S, is_full, q.device)
                s = qs[:, :, i] @ ks[:, :, j].transpose(-2, -1) * sc
                s = tile_scores(s, b, h, i, j, is_full, None if block_mask is None else block_mask.mask_mod,
                                score_mod)
                st = online_step(*st, s, vs[:, :, j])
            o, ls = finish(*st)
            out[b[:, None], h[None, :], i[0]:i[-1] + 1] = o
            lse[b[:, None], h[None, :], i[0]:i[-1] + 1] = ls
    return out, lse


def right_tile(s, b, h, i, j, full, mask_mod, score_mod):
    """score_mod on the scaled scores, then -inf where mask_mod hides a key (partial blocks only)."""
    if score_mod is not None:
        s = score_mod(s, *grids(b, h, i, j))
    if not full:
        s = s.masked_fill(~on_index(mask_mod, b, h, i, j), -math.inf)
    return s


def flex_tiled(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    """Right: the block-sparse walk, mask_mod inside partial blocks only, float32 statistics."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa)
    return flex_finish(query, out, lse, return_lse)


def dense_scores(query, key, value, score_mod, block_mask, scale, enable_gqa, mod_after_mask=False):
    """Every score at once, FlexAttention's eager way: scale, score_mod, then -inf where mask_mod hides a key
    (mod_after_mask applies score_mod after the mask, a bug). Returns the scores (B, H, L, S) and v."""
    B, H, L, E = query.shape
    S = key.shape[2]
    sc = E ** -0.5 if scale is None else scale
    q, k, v = flex_heads(query, key, value, enable_gqa)
    idx = [torch.arange(n, device=q.device) for n in (B, H, L, S)]
    s = q @ k.transpose(-2, -1) * sc
    if score_mod is not None and not mod_after_mask:
        s = score_mod(s, *grids(*idx))
    if block_mask is not None:
        s = s.masked_fill(~on_index(block_mask.mask_mod, *idx), -math.inf)
    if score_mod is not None and mod_after_mask:
        s = score_mod(s, *grids(*idx))
    return s, v


def flex_dense(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False, return_lse=False):
    """Right: FlexAttention's own eager reference, every score, score_mod and the whole mask, one softmax."""
    s, v = dense_scores(query, key, value, score_mod, block_mask, scale, enable_gqa)
    st = online_step(*online_init(s.shape[:-1], v.shape[-1], s.dtype, s.device), s, v)
    out, lse = online_finish(*st)
    return flex_finish(query, out, lse, return_lse)
