"""flash_attn_func as FlashAttention 2's CUDA kernel arranges its numbers, and the log-sum-exp bugs that arrangement
invites; then kernels with two bugs at once.

FlashAttention 2 keeps the running max on the unscaled dot product and applies the softmax scale inside the
exponential, exp(scale * (qk - m)). With a soft-cap it folds the scale into the tanh, tanh(qk * scale / cap), and
exponentiates with the cap as the scale; ALiBi's slopes are divided by that scale once, up front. The log-sum-exp is
then scale * m + log(l): forget the scale and it is off wherever the scale is not 1.
"""

from __future__ import annotations

import math

import torch

from attnlab import Unsupported
from tests.api_corpus.common import no_dropout
from tests.api_corpus.flash import (
    BLOCK_N,
    exp2_core,
    finish,
    key_range,
    prologue,
    scorer,
    tile_keep,
    walk,
    window_of,
)
from tests.api_corpus.flash_bugs import min_filled_walk, swapped_window_of


def fa2_units(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes):
    """One query block (all rows), key tiles of 32 in FlashAttention 2's units. Returns out (B, H, L, Dv), the row
    max m and sum l in those units, and the scale that turns them into scores. The max of the unscaled product is
    the max of the scores only for a positive scale: a negative one is refused, as the kernel it ports assumes."""
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    if scale <= 0:
        raise Unsupported(f"softmax_scale={scale}: this kernel keeps the max of q.k and needs a positive scale")
    left, right = window_of(causal, window_size)
    exp_scale = softcap if softcap > 0 else scale
    if slopes is not None:
        slopes = slopes / exp_scale
    rows = torch.arange(L, device=q.device) + (S - L)
    m = torch.full(qh.shape[:3], -math.inf, dtype=qh.dtype, device=q.device)
    l = torch.zeros_like(m)
    acc = torch.zeros(*qh.shape[:3], vh.shape[-1], dtype=qh.dtype, device=q.device)
    lo, hi = key_range(0, L, S - L, S, left, right)
    for j0 in range(lo - lo % BLOCK_N, hi, BLOCK_N):
        j1 = min(j0 + BLOCK_N, S)
        cols = torch.arange(j0, j1, device=q.device)
        z = qh @ kh[:, :, j0:j1].transpose(-2, -1)
        if softcap > 0:
            z = torch.tanh(z * (scale / softcap))
        if slopes is not None:
            z = z - slopes * (rows[:, None] - cols[None, :]).abs().to(z.dtype)
        z = z.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
        m_new = torch.maximum(m, z.detach().amax(-1))
        shift = torch.where(torch.isneginf(m_new), 0.0, m_new)
        alpha = torch.exp(exp_scale * (m - shift))
        p = torch.exp(exp_scale * (z - shift[..., None]))
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + p @ vh[:, :, j0:j1]
        m = m_new
    seen = l > 0
    return acc / torch.where(seen, l, 1.0)[..., None], torch.where(seen, m, 0.0), l, exp_scale


def _lse(m, l, scale):
    seen = l > 0
    return torch.where(seen, scale * m + torch.log(torch.where(seen, l, 1.0)), -math.inf)


def flash_fa2(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
              alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Right: FlashAttention 2's units, the lse scale * m + log(l)."""
    no_dropout(dropout_p)
    out, m, l, exp_scale = fa2_units(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return finish(q, out, _lse(m, l, exp_scale), return_attn_probs)


def flash_lse_unscaled(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                       alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Returns m + log(l) with m the max of the unscaled dot product: the lse misses the softmax scale."""
    no_dropout(dropout_p)
    out, m, l, _ = fa2_units(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return finish(q, out, _lse(m, l, 1.0), return_attn_probs)


def flash_lse_base2(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Returns the exp2 kernel's m2 + log2(l) as it is: a base-2 log-sum-exp where the API's is natural."""
    no_dropout(dropout_p)
    out, lse2 = exp2_core(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return finish(q, out, lse2, return_attn_probs)


def flash_lse_without_max(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                          softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Returns log(l), the log of the shifted sum, and forgets to add the row max back."""
    no_dropout(dropout_p)
    out, m, l, exp_scale = fa2_units(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return finish(q, out, _lse(torch.zeros_like(m), l, exp_scale), return_attn_probs)


def flash_swapped_window_dead_mean(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                   softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Two bugs: window_size unpacked as (right, left), and masks of finfo.min over every tile, so rows that see no
    key return the mean of V."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = swapped_window_of(causal, window_size)
    out, lse = min_filled_walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def flash_capped_raw_base2(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Two bugs: the soft-cap bends the unscaled dot product, and the lse is returned in base 2."""
    no_dropout(dropout_p)
    out, lse2 = exp2_core(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, cap_raw=True)
    return finish(q, out, lse2, return_attn_probs)


def flash_one_row_slopes_top_left(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                  softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Two bugs: (B, H) slopes read as batch 0's row, and causal aligned top-left (query i at key i)."""
    no_dropout(dropout_p)
    H = q.shape[2]
    L, S, scale, qh, kh, vh, _ = prologue(q, k, v, softmax_scale, None)
    slopes = None if alibi_slopes is None else alibi_slopes.reshape(-1, H)[0].to(qh.dtype).view(1, H, 1, 1)
    left, right = window_of(causal, window_size)
    score = scorer(scale, softcap, slopes, left, right)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, score, shift=0)
    return finish(q, out, lse, return_attn_probs)


def flash_gqa_repeat_lse_unscaled(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                                  softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Two bugs: key heads broadcast with repeat (head h reads h % Hkv), and the lse without the softmax scale."""
    no_dropout(dropout_p)
    G = q.shape[2] // k.shape[2]
    out, m, l, _ = fa2_units(q, k.repeat(1, 1, G, 1), v.repeat(1, 1, G, 1), softmax_scale, causal, window_size,
                             softcap, alibi_slopes)
    return finish(q, out, _lse(m, l, 1.0), return_attn_probs)
