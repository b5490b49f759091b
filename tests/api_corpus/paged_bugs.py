"""Paged-cache kernels with the bugs pages invite: a token's page off by one, block_table or cache_seqlens ignored,
the stale slots of the last page attended, the new keys written at the wrong slot or not at all, the causal diagonal
top-left; one bug each, then two at once.
"""

from __future__ import annotations

import torch

from tests.api_corpus.common import dense_softmax
from tests.api_corpus.flash import window_of
from tests.api_corpus.paged import append_kv, gather_scores, page_walk, paged_finish


def _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v, append_at=None, appended=True):
    """The scale, the caches with the new keys written (at append_at(b) + t; not at all unless appended) and each
    sequence's key count."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    kc, vc = (append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table, append_at) if appended
              else (k_cache, v_cache))
    return scale, kc, vc, [int(n) + (0 if k is None else k.shape[1]) for n in cache_seqlens]


def _raw_cap(qk, scale, softcap):
    """The soft-cap on the raw dot product, the scale after (the bug of paged_softcap_before_scale)."""
    return (softcap * torch.tanh(qk / softcap) if softcap > 0 else qk) * scale


def _token_page_plus_one(block_table, bs):
    """A token's table column as (pos + 1) // block_size (a length where an index belongs), clamped when the last
    token ran off the table."""
    return lambda pos: torch.clamp((pos + 1) // bs, max=block_table.shape[1] - 1)


def paged_page_offset(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                      return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Looks a token's page up as (pos + 1) // block_size: the last slot of each page is read from the next page
    (a clamp added for the last token hides the IndexError)."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    s, V = gather_scores(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         page_index=_token_page_plus_one(block_table, k_cache.shape[1]))
    p, lse = dense_softmax(s)
    return paged_finish(q, p @ V, lse, return_softmax_lse)


def paged_table_ignored(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                        return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Reads sequence b's pages as b * max_blocks + p, as if the allocator handed them out in order; block_table is
    never consulted."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    per_seq = block_table.shape[1]
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         page_of=lambda b, p: b * per_seq + p)
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_seqlens_ignored(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                          return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Attends every slot of every page in block_table: cache_seqlens is never read, stale and unused pages
    count."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    s, V = gather_scores(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         bound=False)
    p, lse = dense_softmax(s)
    return paged_finish(q, p @ V, lse, return_softmax_lse)


def _whole_pages(bs):
    return lambda p, n: torch.arange(p * bs, (p + 1) * bs)


def paged_stale_slots(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                      return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Loads the last page whole: the slots past cache_seqlens in it (stale keys) are attended, as if the length
    were rounded up to the block."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         slots_of=_whole_pages(k_cache.shape[1]))
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_append_wrong_slot(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                            softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                            window_size=(-1, -1)):
    """Writes the new keys from position cache_seqlens[b] - 1, as if the length already counted the new token: the
    last cached key is overwritten and the last new slot keeps a stale key."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v,
                                    append_at=lambda b: max(int(cache_seqlens[b]) - 1, 0))
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size))
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_append_missing(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                         return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Counts the new keys in the length but never writes them into the cache (it assumed the caller had): the
    queries attend whatever the slots held."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v,
                                    appended=False)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size))
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_causal_top_left(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                          return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Places query i at key i, not at i + n - Lq: under causal a decoding query sees only the first key."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         offset_of=lambda n, Lq: 0)
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_gqa_repeat(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                     return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Reads query head h's keys from cache head h % Hkv (repeat, not repeat_interleave)."""
    G = q.shape[2] // k_cache.shape[2]
    k_cache, v_cache = k_cache.repeat(1, 1, G, 1), v_cache.repeat(1, 1, G, 1)
    if k is not None:
        k, v = k.repeat(1, 1, G, 1), v.repeat(1, 1, G, 1)
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size))
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_softcap_before_scale(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                               softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                               window_size=(-1, -1)):
    """Caps the raw dot product, cap * tanh(qk / cap), and scales after."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         score=_raw_cap)
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_empty_nan(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None, softcap=0.0,
                    return_softmax_lse=False, k=None, v=None, causal=False, window_size=(-1, -1)):
    """Normalises by the row sum unguarded: a sequence with an empty cache (no keys) returns NaN, not zeros."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    s, V = gather_scores(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size))
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    return paged_finish(q, e / l @ V, (m + torch.log(l)).squeeze(-1), return_softmax_lse)


def paged_stale_slots_table_ignored(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                                    softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                                    window_size=(-1, -1)):
    """Two bugs: pages read in allocation order (b * max_blocks + p) without block_table, and the last page loaded
    whole (stale slots attended)."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    per_seq = block_table.shape[1]
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         page_of=lambda b, p: b * per_seq + p, slots_of=_whole_pages(k_cache.shape[1]))
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_append_missing_top_left(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                                  softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                                  window_size=(-1, -1)):
    """Two bugs: the new keys counted but never written, and causal aligned top-left (query i at key i)."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v,
                                    appended=False)
    out, lse = page_walk(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         offset_of=lambda n, Lq: 0)
    return paged_finish(q, out, lse, return_softmax_lse)


def paged_page_offset_raw_cap(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                              softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                              window_size=(-1, -1)):
    """Two bugs: a token's page as (pos + 1) // block_size, and the soft-cap on the raw dot product."""
    scale, kc, vc, lengths = _setup(q, k_cache, v_cache, cache_seqlens, block_table, softmax_scale, k, v)
    s, V = gather_scores(q, kc, vc, block_table, lengths, 1.0, 0.0, *window_of(causal, window_size),
                         page_index=_token_page_plus_one(block_table, k_cache.shape[1]))
    p, lse = dense_softmax(torch.where(torch.isneginf(s), s, _raw_cap(s, scale, softcap)))
    return paged_finish(q, p @ V, lse, return_softmax_lse)
