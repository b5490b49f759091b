"""flash_attn_varlen_func kernels with the bugs packing invites: a cu_seqlens boundary off by one, max_seqlen taken as
every length, causal aligned per packed index or top-left, rows assigned to the wrong sequence; one bug each, then
two at once.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import dense_softmax, no_dropout
from tests.api_corpus.flash import LOG2E, scorer, tile_keep, window_of
from tests.api_corpus.varlen import block_diagonal_scores, packed_finish, packed_heads, seq_slopes, seq_walk


def _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
           return_attn_probs, key_end=None, offset=None, cap_raw=False):
    """The CUDA grid of varlen.seq_walk with a sequence's key end key_end(cu_seqlens_k, b) or causal offset as its
    author computed them; cap_raw caps the unscaled dot product."""
    H, D = q.shape[1], q.shape[2]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = packed_heads(q, k, v)
    left, right = window_of(causal, window_size)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()

    def score_of(b):
        slopes = seq_slopes(alibi_slopes, b, qh.dtype)
        if not cap_raw:
            return scorer(scale, softcap, slopes, left, right)

        def score(qk, rows, cols):  # the cap on the raw dot product, the scale after
            s = (softcap * torch.tanh(qk / softcap) if softcap > 0 else qk) * scale
            if slopes is not None:
                s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
            return s.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
        return score

    outs, lses = seq_walk(qh, kh, vh, cq, ck, left, right, score_of,
                          None if key_end is None else (lambda b: key_end(ck, b)), offset)
    return packed_finish(q, outs, lses, H, vh.shape[-1], qh.dtype, return_attn_probs)


def varlen_key_leak(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                    deterministic=False, return_attn_probs=False):
    """Reads cu_seqlens_k[b + 1] as an inclusive end: each sequence also attends the next sequence's first key."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, key_end=lambda ck, b: min(ck[b + 1] + 1, ck[-1]))


def varlen_max_seqlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                      softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                      deterministic=False, return_attn_probs=False):
    """Gives every sequence max_seqlen_k keys from its start: shorter sequences read into the next one's keys."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, key_end=lambda ck, b: min(ck[b] + int(max_seqlen_k), ck[-1]))


def varlen_causal_top_left(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False):
    """Places query i of each sequence at key i: causal top-left, wrong for every sequence with L_b != S_b."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, offset=lambda b, Sb, Lb: 0)


def varlen_offset_from_max(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False):
    """Aligns every sequence's causal diagonal by max_seqlen_k - max_seqlen_q, not by its own S_b - L_b."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, offset=lambda b, Sb, Lb: int(max_seqlen_k) - int(max_seqlen_q))


def varlen_causal_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                         softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                         deterministic=False, return_attn_probs=False):
    """Block-diagonal form whose causal test compares packed indices (key row <= query row), not positions inside
    the sequence: right only where a sequence starts at the same packed row in q and k and L_b == S_b."""
    no_dropout(dropout_p)
    s, vh = block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, False, window_size, softcap,
                                  alibi_slopes)
    if causal:
        rows, cols = torch.arange(q.shape[0], device=q.device), torch.arange(k.shape[0], device=q.device)
        s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
    p, lse = dense_softmax(s)
    return packed_finish(q, [p @ vh], [lse], q.shape[1], vh.shape[-1], vh.dtype, return_attn_probs)


def varlen_query_leak(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                      softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                      deterministic=False, return_attn_probs=False):
    """Finds each query row's sequence with searchsorted(side='left'): the first row of every sequence is taken as
    the previous sequence's (row 0 as the last's) and attends its keys."""
    no_dropout(dropout_p)
    s, vh = block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, q_side="left")
    p, lse = dense_softmax(s)
    return packed_finish(q, [p @ vh], [lse], q.shape[1], vh.shape[-1], vh.dtype, return_attn_probs)


def varlen_lse_padded(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                      softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                      deterministic=False, return_attn_probs=False):
    """Returns the lse padded per sequence, (nseq, H, max_seqlen_q) as older FlashAttention 2 releases did, where
    the API's is packed (H, total_q)."""
    no_dropout(dropout_p)
    out, lse, _ = _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                         alibi_slopes, True)
    cq = cu_seqlens_q.tolist()
    padded = lse.new_full((len(cq) - 1, q.shape[1], int(max_seqlen_q)), math.inf)
    for b in range(len(cq) - 1):
        padded[b, :, :cq[b + 1] - cq[b]] = lse[:, cq[b]:cq[b + 1]]
    return (out, padded, None) if return_attn_probs else out


def varlen_empty_nan(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                     softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                     deterministic=False, return_attn_probs=False):
    """Divides by the row sum unguarded: a sequence with no keys, or rows its causal window leaves empty, is NaN."""
    no_dropout(dropout_p)
    s, vh = block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes)
    m = s.detach().amax(-1, keepdim=True)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    lse = (m + torch.log(l)).squeeze(-1)
    return packed_finish(q, [e / l @ vh], [lse], q.shape[1], vh.shape[-1], vh.dtype, return_attn_probs)


def varlen_key_leak_top_left(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                             softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """Two bugs: cu_seqlens_k[b + 1] read as an inclusive end (a key leaks in from the next sequence), and causal
    aligned top-left in each sequence."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, key_end=lambda ck, b: min(ck[b + 1] + 1, ck[-1]),
                  offset=lambda b, Sb, Lb: 0)


def varlen_max_seqlen_capped_raw(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                 softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                 alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Two bugs: max_seqlen_k keys for every sequence, and the soft-cap on the unscaled dot product."""
    no_dropout(dropout_p)
    return _tiled(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  return_attn_probs, key_end=lambda ck, b: min(ck[b] + int(max_seqlen_k), ck[-1]),
                  cap_raw=True)


def varlen_query_leak_base2(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                            deterministic=False, return_attn_probs=False):
    """Two bugs: query rows' sequences found with searchsorted(side='left') (boundary rows leak into the previous
    sequence), and an exp2 softmax whose lse is returned in base 2."""
    no_dropout(dropout_p)
    s, vh = block_diagonal_scores(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, q_side="left")
    s2 = s * LOG2E
    m2 = s2.detach().amax(-1, keepdim=True)
    m2 = torch.where(torch.isneginf(m2), 0.0, m2)
    p = torch.exp2(s2 - m2)
    l = p.sum(-1, keepdim=True)
    seen = l > 0
    lse2 = torch.where(seen, m2 + torch.log2(torch.where(seen, l, 1.0)), -math.inf).squeeze(-1)
    out = p @ vh / torch.where(seen, l, 1.0)
    return packed_finish(q, [out], [lse2], q.shape[1], vh.shape[-1], vh.dtype, return_attn_probs)


def varlen_gqa_repeat(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                      softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                      deterministic=False, return_attn_probs=False):
    """Broadcasts key heads with repeat, not repeat_interleave: query head h reads key head h % Hkv."""
    no_dropout(dropout_p)
    G = q.shape[1] // k.shape[1]
    return _tiled(q, k.repeat(1, G, 1), v.repeat(1, G, 1), cu_seqlens_q, cu_seqlens_k, softmax_scale, causal,
                  window_size, softcap, alibi_slopes, return_attn_probs)
