"""flex_attention kernels with the bugs a block-sparse walk invites: score_mod after the mask, the wrong block size,
partial blocks read as full or skipped, score_mod given the wrong indices, zero padding keys attended; one bug each,
then two at once. Each is flex.flex_walk with the part its author got wrong.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests.api_corpus.flash import LOG2E
from tests.api_corpus.flex import (
    DEFAULT_BLOCK,
    block_lists,
    cut_at_s,
    dense_scores,
    flex_finish,
    flex_walk,
    grids,
    on_index,
    right_tile,
)


def _mod_after_mask(s, b, h, i, j, full, mask_mod, score_mod):
    if not full:
        s = s.masked_fill(~on_index(mask_mod, b, h, i, j), -math.inf)
    return s if score_mod is None else score_mod(s, *grids(b, h, i, j))


def _mod_swapped_index(s, b, h, i, j, full, mask_mod, score_mod):
    if score_mod is not None:
        gb, gh, gi, gj = grids(b, h, i, j)
        s = score_mod(s, gb, gh, gj, gi)
    return s if full else s.masked_fill(~on_index(mask_mod, b, h, i, j), -math.inf)


def _as_full(s, b, h, i, j, full, mask_mod, score_mod):
    return right_tile(s, b, h, i, j, True, mask_mod, score_mod)


def _repeat_heads(query, key, value):
    G = query.shape[1] // key.shape[1]
    return key.repeat(1, G, 1, 1), value.repeat(1, G, 1, 1)


def flex_mod_after_mask(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                        return_lse=False):
    """Applies score_mod after the mask: a soft-cap turns a masked -inf into -cap, so masked keys get weight."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=_mod_after_mask)
    return flex_finish(query, out, lse, return_lse)


def flex_block_size_64(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                       return_lse=False):
    """Reads the key block indices in blocks of 64, its own BLOCK_N, not the mask's KV_BLOCK (128 by default)."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, kv_block=64)
    return flex_finish(query, out, lse, return_lse)


def flex_partial_as_full(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                         return_lse=False):
    """Treats the partial key blocks as full: mask_mod is never evaluated, every key of a listed block is seen."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=_as_full)
    return flex_finish(query, out, lse, return_lse)


def flex_full_blocks_only(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                          return_lse=False):
    """Walks full_kv_indices alone, never the partial kv_indices: the visible keys of every partial block are lost."""
    def full_only(*args):
        sizes, lists = block_lists(*args)
        return sizes, {slot: [([], full) for _, full in per_block] for slot, per_block in lists.items()}

    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, blocks=full_only)
    return flex_finish(query, out, lse, return_lse)


def flex_mod_index(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False):
    """Calls score_mod(score, b, h, kv_idx, q_idx): a position-dependent modification reads the wrong distance."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=_mod_swapped_index)
    return flex_finish(query, out, lse, return_lse)


def flex_mod_kv_head(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                     return_lse=False):
    """Passes score_mod the key head, h // (H / Hkv), where FlexAttention passes the query head: under GQA a
    per-head bias (ALiBi's slopes) is read from the wrong head."""
    G = query.shape[1] // key.shape[1]

    def tile(s, b, h, i, j, full, mask_mod, mod):
        if mod is not None:
            gb, gh, gi, gj = grids(b, h // G, i, j)
            s = mod(s, gb, gh, gi, gj)
        return s if full else s.masked_fill(~on_index(mask_mod, b, h, i, j), -math.inf)

    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=tile)
    return flex_finish(query, out, lse, return_lse)


def flex_gqa_repeat(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                    return_lse=False):
    """Broadcasts key heads with repeat, not repeat_interleave: query head h reads key head h % Hkv."""
    key, value = _repeat_heads(query, key, value)
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa)
    return flex_finish(query, out, lse, return_lse)


def flex_pad_keys(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                  return_lse=False):
    """Pads K and V with zeros to whole key blocks and bounds the keys only where it masks (partial blocks): a full
    last block, or no block_mask at all, attends the zero padding keys when S is not a multiple of the block."""
    S = key.shape[2]
    KB = DEFAULT_BLOCK if block_mask is None else block_mask.BLOCK_SIZE[1]
    pad = -S % KB
    key, value = F.pad(key, (0, 0, 0, pad)), F.pad(value, (0, 0, 0, pad))

    def cols(n, kb, s_padded, full, device):
        return cut_at_s(n, kb, s_padded if full else S, full, device)

    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, key_cols=cols)
    return flex_finish(query, out, lse, return_lse)


def flex_dead_rows_nan(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                       return_lse=False):
    """Ends a query block with acc / l unguarded: a row whose mask shows it no key is 0 / 0 = NaN, not zeros."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa,
                         finish=lambda m, l, acc: (acc / l[..., None], m + torch.log(l)))
    return flex_finish(query, out, lse, return_lse)


def _exp2_dense(query, key, value, score_mod, block_mask, scale, enable_gqa, mod_after_mask=False):
    """FlexAttention's math in the exp2 form, every score at once; returns out and the base-2 lse."""
    s, v = dense_scores(query, key, value, score_mod, block_mask, scale, enable_gqa, mod_after_mask)
    s2 = s * LOG2E
    m2 = s2.amax(-1, keepdim=True)
    m2 = torch.where(torch.isneginf(m2), 0.0, m2)
    p = torch.exp2(s2 - m2)
    l = p.sum(-1, keepdim=True)
    seen = l > 0
    out = p @ v / torch.where(seen, l, 1.0)
    return out, torch.where(seen, m2 + torch.log2(torch.where(seen, l, 1.0)), -math.inf).squeeze(-1)


def flex_lse_base2(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False):
    """Returns the exp2 kernel's base-2 log-sum-exp as it is, where FlexAttention's is natural."""
    out, lse2 = _exp2_dense(query, key, value, score_mod, block_mask, scale, enable_gqa)
    return flex_finish(query, out, lse2, return_lse)


def flex_mod_index_block_64(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                            return_lse=False):
    """Two bugs: score_mod given (kv_idx, q_idx) for (q_idx, kv_idx), and key blocks read as 64 wide."""
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=_mod_swapped_index,
                         kv_block=64)
    return flex_finish(query, out, lse, return_lse)


def flex_partial_as_full_gqa_repeat(query, key, value, score_mod=None, block_mask=None, scale=None,
                                    enable_gqa=False, return_lse=False):
    """Two bugs: partial key blocks treated as full (no mask_mod), and key heads broadcast with repeat."""
    key, value = _repeat_heads(query, key, value)
    out, lse = flex_walk(query, key, value, score_mod, block_mask, scale, enable_gqa, tile_scores=_as_full)
    return flex_finish(query, out, lse, return_lse)


def flex_mod_after_mask_base2(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                              return_lse=False):
    """Two bugs: score_mod applied after the mask (masked scores made finite by a cap), and a base-2 lse."""
    out, lse2 = _exp2_dense(query, key, value, score_mod, block_mask, scale, enable_gqa, mod_after_mask=True)
    return flex_finish(query, out, lse2, return_lse)
