"""flash_attn_func kernels that each carry one bug a kernel author ships: the window's sides, the soft-cap's place,
ALiBi's slopes, the log-sum-exp's base and scale, the causal alignment, rows that see no key, the last key tile.

Each is the tiled kernel of tests/api_corpus/flash.py as its author wrote it, the bug in its loop.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import no_dropout, online_init, online_step
from tests.api_corpus.flash import BLOCK_N, finish, prologue, scorer, tile_keep, walk, window_of


def swapped_window_of(causal: bool, window_size) -> tuple[int, int]:
    """window_size read as (right, left): the bug of flash_window_swapped."""
    right, left = (int(w) for w in window_size)
    return left, 0 if causal else right


def flash_window_swapped(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                         softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Unpacks window_size as (right, left): an asymmetric window looks the wrong way."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = swapped_window_of(causal, window_size)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def flash_softcap_before_scale(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                               softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Caps the raw dot product, cap * tanh(qk / cap), and scales after: the cap bends the wrong numbers."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)

    def score(qk, rows, cols):
        if softcap > 0:
            qk = softcap * torch.tanh(qk / softcap)
        s = qk * scale
        if slopes is not None:
            s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
        return s.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)


def flash_softcap_after_mask(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Masks first and caps after: tanh(-inf) * cap = -cap, so masked keys inside a loaded tile get weight."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)

    def score(qk, rows, cols):
        s = (qk * scale).masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
        return s

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)


def flash_alibi_one_row(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Reads (B, H) ALiBi slopes as their first row: every batch gets batch 0's slopes."""
    no_dropout(dropout_p)
    H = q.shape[2]
    L, S, scale, qh, kh, vh, _ = prologue(q, k, v, softmax_scale, None)
    slopes = None if alibi_slopes is None else alibi_slopes.reshape(-1, H)[0].to(qh.dtype).view(1, H, 1, 1)
    left, right = window_of(causal, window_size)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def flash_causal_top_left(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                          softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Places query i at key i (PyTorch's is_causal), not at i + S - L: wrong whenever L != S."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    score = scorer(scale, softcap, slopes, left, right)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, score, shift=0)
    return finish(q, out, lse, return_attn_probs)


def flash_dead_rows_mean(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                         softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Masks with finfo.min instead of -inf and walks every tile: a row that sees no key averages all of V."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    out, lse = min_filled_walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def min_filled_walk(q, qh, kh, vh, L, S, left, right, right_score):
    """The walk over every key tile with hidden scores finfo.min instead of -inf (dead rows average V)."""
    def score(qk, rows, cols):
        s = right_score(qk, rows, cols)
        return s.masked_fill(torch.isneginf(s), torch.finfo(s.dtype).min)

    return walk(q, qh, kh, vh, L, S, left, right, score, tiles=lambda lo, hi: range(0, S, BLOCK_N))


def flash_dead_rows_nan(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Divides by the row sum without a guard: a row that sees no key (L > S causal) is 0 / 0 = NaN."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    score = scorer(scale, softcap, slopes, left, right)
    m, l, acc = online_init(qh[..., 0].shape, vh.shape[-1], qh.dtype, q.device)
    rows = torch.arange(L, device=q.device) + S - L
    for j0 in range(0, S, BLOCK_N):
        j1 = min(j0 + BLOCK_N, S)
        s = score(qh @ kh[:, :, j0:j1].transpose(-2, -1), rows, torch.arange(j0, j1, device=q.device))
        m, l, acc = online_step(m, l, acc, s, vh[:, :, j0:j1])
    out = acc / l[..., None]
    return finish(q, out, m + torch.log(l), return_attn_probs)


def flash_window_off_by_one(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Tests the window's left edge with > instead of >=: each row sees one key too few on the left."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    right_score = scorer(scale, softcap, slopes, -1, right)

    def score(qk, rows, cols):
        s = right_score(qk, rows, cols)
        return s if left < 0 else s.masked_fill(~(cols[None, :] > rows[:, None] - left), -math.inf)

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)


def flash_last_tile_dropped(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Counts key tiles with // instead of a ceiling division: the last partial tile is never loaded."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    score = scorer(scale, softcap, slopes, left, right)

    def tiles(lo, hi):
        first = lo - lo % BLOCK_N
        return range(first, first + (hi - first) // BLOCK_N * BLOCK_N, BLOCK_N)  # the tile count floored

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score, tiles=tiles)
    return finish(q, out, lse, return_attn_probs)


def flash_gqa_repeat(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                     alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Broadcasts key heads with repeat, not repeat_interleave: query head h reads key head h % Hkv."""
    no_dropout(dropout_p)
    G = q.shape[2] // k.shape[2]
    k, v = k.repeat(1, 1, G, 1), v.repeat(1, 1, G, 1)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def flash_alibi_signed(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                       alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Takes ALiBi's distance as i - j without the absolute value (right only under causal): keys ahead of the
    query are boosted, not penalised."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    right_score = scorer(scale, softcap, None, left, right)

    def score(qk, rows, cols):
        s = right_score(qk, rows, cols)
        return s if slopes is None else s - slopes * (rows[:, None] - cols[None, :]).to(s.dtype)

    out, lse = walk(q, qh, kh, vh, L, S, left, right, score)
    return finish(q, out, lse, return_attn_probs)
