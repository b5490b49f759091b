"""Precision bugs written to the other APIs, each a second or third rounding order of a cause
tests/api_corpus/precision_sdpa.py writes on SDPA's signature: scores in the input dtype (a tile's scaled scores
stored in q's dtype; bfloat16 dot products over gathered pages), the scale folded in the input dtype (into q with
log2(e), into the packed keys, into the query before a block-sparse walk), a float32 accumulator or ALiBi bias in a
float64 run.

None is wrong in exact arithmetic; each loses more than its dtype's rounding allows somewhere.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import dense_softmax, no_dropout, online_finish
from tests.api_corpus.flash import LOG2E, finish, prologue, scorer, tile_keep, walk, window_of
from tests.api_corpus.flex import flex_finish, flex_walk
from tests.api_corpus.paged import append_kv, gather_scores, paged_finish
from tests.api_corpus.varlen import packed_finish, packed_heads, seq_slopes, seq_walk


def flash_scores_tile_input_dtype(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                  softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Stores each tile's scaled scores in a buffer of q's dtype before the online softmax (float32 products, one
    rounding of the scaled score to bfloat16)."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)

    def score(qk, rows, cols):
        s = (qk * scale).to(q.dtype).to(qh.dtype)
        return scorer(1.0, softcap, slopes, left, right)(s, rows, cols)

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)


def paged_scores_input_dtype(q, k_cache, v_cache, cache_seqlens=None, block_table=None, softmax_scale=None,
                             softcap=0.0, return_softmax_lse=False, k=None, v=None, causal=False,
                             window_size=(-1, -1)):
    """Gathers the pages and takes q.K^T in the cache's dtype (bfloat16 dot products, one rounding), scaling and
    the softmax in float32 after."""
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    kc, vc = append_kv(k_cache, v_cache, k, v, cache_seqlens, block_table)
    lengths = [int(n) + (0 if k is None else k.shape[1]) for n in cache_seqlens]
    s, V = gather_scores(q, kc, vc, block_table, lengths, scale, softcap, *window_of(causal, window_size),
                         dot_dtype=q.dtype)
    p, lse = dense_softmax(s)
    return paged_finish(q, p @ V, lse, return_softmax_lse)


def flash_exp2_folded_q(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """The Triton tutorial's trick done in the input dtype: q * (scale * log2(e)) rounded to bfloat16 before the
    dot product, then exp2."""
    no_dropout(dropout_p)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    q2 = q * (scale * LOG2E)  # in q's dtype
    L, S, _, qh, kh, vh, slopes = prologue(q2, k, v, 1.0, alibi_slopes)
    left, right = window_of(causal, window_size)
    rows = torch.arange(L, device=q.device) + (S - L)
    cols = torch.arange(S, device=q.device)
    s2 = qh @ kh.transpose(-2, -1)  # base-2 scores
    if softcap > 0:
        s2 = softcap * LOG2E * torch.tanh(s2 / (softcap * LOG2E))
    if slopes is not None:
        s2 = s2 - LOG2E * slopes * (rows[:, None] - cols[None, :]).abs().to(s2.dtype)
    s2 = s2.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
    m2 = s2.detach().amax(-1, keepdim=True)
    m2 = torch.where(torch.isneginf(m2), 0.0, m2)
    p = torch.exp2(s2 - m2)
    l = p.sum(-1, keepdim=True)
    seen = l > 0
    out = p @ vh / torch.where(seen, l, 1.0)
    lse = torch.where(seen, (m2 + torch.log2(torch.where(seen, l, 1.0))) / LOG2E, -math.inf).squeeze(-1)
    return finish(q, out, lse, return_attn_probs)


def varlen_scale_folded_k(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                          softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                          deterministic=False, return_attn_probs=False):
    """Folds the softmax scale into the packed keys once, in the input dtype (k * scale rounded to bfloat16), to
    save a multiply per tile."""
    no_dropout(dropout_p)
    H, D = q.shape[1], q.shape[2]
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = packed_heads(q, k * scale, v)
    left, right = window_of(causal, window_size)
    outs, lses = seq_walk(qh, kh, vh, cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), left, right,
                          lambda b: scorer(1.0, softcap, seq_slopes(alibi_slopes, b, qh.dtype), left, right))
    return packed_finish(q, outs, lses, H, vh.shape[-1], qh.dtype, return_attn_probs)


def flash_accumulator_float32(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Allocates the row sum and the accumulator with torch.zeros(...) in the default dtype and updates them in
    place: a float64 run accumulates in float32."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    score = scorer(scale, softcap, slopes, left, right)
    rows, BLOCK = torch.arange(L, device=q.device) + S - L, 32
    m = torch.full(qh.shape[:3], -math.inf, dtype=qh.dtype, device=q.device)
    l = torch.zeros(qh.shape[:3], device=q.device)
    acc = torch.zeros(*qh.shape[:3], vh.shape[-1], device=q.device)
    for j0 in range(0, S, BLOCK):
        j1 = min(j0 + BLOCK, S)
        s = score(qh @ kh[:, :, j0:j1].transpose(-2, -1), rows, torch.arange(j0, j1, device=q.device))
        m_new = torch.maximum(m, s.detach().amax(-1))
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)
        p = torch.exp(s - shift[..., None])
        alpha = torch.exp(m - shift)
        l.mul_(alpha).add_(p.sum(-1))
        acc.mul_(alpha[..., None]).add_(p @ vh[:, :, j0:j1])
        m = m_new
    out, lse = online_finish(m, l.to(qh.dtype), acc.to(qh.dtype))
    return finish(q, out, lse, return_attn_probs)


def flash_alibi_float32(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                        alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Builds the ALiBi bias in float32 (slopes.float() times float distances), whatever the input dtype: a float64
    run adds a bias rounded to float32."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, _ = prologue(q, k, v, softmax_scale, None)
    left, right = window_of(causal, window_size)
    H = q.shape[2]
    slopes = None if alibi_slopes is None else alibi_slopes.float().reshape(-1, H, 1, 1)
    right_score = scorer(scale, softcap, None, left, right)

    def score(qk, rows, cols):
        s = right_score(qk, rows, cols)
        if slopes is None:
            return s
        return s - slopes * (rows[:, None] - cols[None, :]).abs().float()  # a float32 bias

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)


def flex_scale_folded_q(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                        return_lse=False):
    """Multiplies the query by the scale itself, in the input dtype (q * scale rounded to bfloat16), and runs the
    block-sparse walk with scale=1."""
    sc = query.shape[-1] ** -0.5 if scale is None else scale
    out, lse = flex_walk(query * sc, key, value, score_mod, block_mask, 1.0, enable_gqa)
    return flex_finish(query, out, lse, return_lse)
