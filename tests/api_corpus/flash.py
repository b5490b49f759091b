"""flash_attn_func, written the way its CUDA kernel runs: a grid of query blocks, each walking the key tiles it can see.

flash_attn_func(q, k, v, ...) takes (B, L, H, D) queries and (B, S, Hkv, D) keys and values. Causal and the window are
aligned bottom-right: query i sits at key position i + S - L, and sees keys j with
i + S - L - left <= j <= i + S - L + right (a side of -1 is unbounded; causal sets right to 0). The soft-cap bends the
scaled score, cap * tanh(s / cap); ALiBi then adds -slope * |i + S - L - j|, with slopes (H,) or (B, H). The
log-sum-exp it returns is natural-log, (B, H, L), over those same scores.
"""

from __future__ import annotations

import math

import torch

from tests.api_corpus.common import compute_dtype, kv_head_index, no_dropout, online_finish, online_init, online_step

BLOCK_M, BLOCK_N = 32, 32
LOG2E = 1.0 / math.log(2.0)


def to_heads(q, k, v):
    """(B, L, H, D) layout -> (B, H, L, D) in the compute dtype, each key head gathered to the query heads it serves."""
    dt = compute_dtype(q.dtype)
    kvh = kv_head_index(q.shape[2], k.shape[2]).to(q.device)
    qh = q.transpose(1, 2).to(dt)
    kh = k.transpose(1, 2).to(dt).index_select(1, kvh)
    vh = v.transpose(1, 2).to(dt).index_select(1, kvh)
    return qh, kh, vh


def slopes_of(alibi_slopes, B: int, H: int, dtype):
    """ALiBi slopes as (B or 1, H, 1, 1) in the compute dtype, or None."""
    if alibi_slopes is None:
        return None
    return alibi_slopes.to(dtype).reshape(B if alibi_slopes.dim() == 2 else 1, H, 1, 1)


def window_of(causal: bool, window_size) -> tuple[int, int]:
    left, right = (int(w) for w in window_size)
    return left, 0 if causal else right


def key_range(i0: int, i1: int, offset: int, S: int, left: int, right: int) -> tuple[int, int]:
    """The keys [lo, hi) that any query of rows [i0, i1), query i at key i + offset, may see; tiles outside it are
    never loaded."""
    lo = 0 if left < 0 else min(S, max(0, i0 + offset - left))
    hi = S if right < 0 else min(S, i1 - 1 + offset + right + 1)
    return lo, max(lo, hi)


def tile_keep(rows, cols, left: int, right: int):
    """(Lt, St) bool: which keys cols each query row (at key position rows) sees."""
    keep = torch.ones(rows.shape[0], cols.shape[0], dtype=torch.bool, device=rows.device)
    if left >= 0:
        keep &= cols[None, :] >= rows[:, None] - left
    if right >= 0:
        keep &= cols[None, :] <= rows[:, None] + right
    return keep


def prologue(q, k, v, softmax_scale, alibi_slopes):
    """The host side every kernel here shares: sizes, the scale, heads-first tensors, the slopes."""
    B, L, H, D = q.shape
    scale = D ** -0.5 if softmax_scale is None else softmax_scale
    qh, kh, vh = to_heads(q, k, v)
    return L, k.shape[1], scale, qh, kh, vh, slopes_of(alibi_slopes, B, H, qh.dtype)


def finish(q, out, lse, return_attn_probs):
    """(B, H, L, D) compute-dtype out -> the caller's layout and dtype; lse float32 (float64 for float64)."""
    out = out.to(q.dtype).transpose(1, 2)
    lse = lse if lse.dtype == torch.float64 else lse.float()
    return (out, lse, None) if return_attn_probs else out


def walk(q, qh, kh, vh, L, S, left, right, score, shift=None, tiles=None):
    """The query-block / key-tile grid, the scoring left to score(qk, rows, cols) -> masked scores. Query i sits at
    key i + shift (default S - L, bottom-right); tiles(lo, hi) lists the key tiles (default: every tile of [lo, hi)).
    Returns out (B, H, L, Dv) and lse (B, H, L) in the compute dtype."""
    outs, lses = [], []
    for i0 in range(0, L, BLOCK_M):
        i1 = min(i0 + BLOCK_M, L)
        offset = S - L if shift is None else shift
        rows = torch.arange(i0, i1, device=q.device) + offset
        m, l, acc = online_init(qh[:, :, i0:i1, 0].shape, vh.shape[-1], qh.dtype, q.device)
        lo, hi = key_range(i0, i1, offset, S, left, right)
        for j0 in (range(lo - lo % BLOCK_N, hi, BLOCK_N) if tiles is None else tiles(lo, hi)):
            j1 = min(j0 + BLOCK_N, S)
            cols = torch.arange(j0, j1, device=q.device)
            s = score(qh[:, :, i0:i1] @ kh[:, :, j0:j1].transpose(-2, -1), rows, cols)
            m, l, acc = online_step(m, l, acc, s, vh[:, :, j0:j1])
        out, lse = online_finish(m, l, acc)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, 2), torch.cat(lses, 2)


def scorer(scale, softcap, slopes, left, right):
    """The right scoring of one tile: scale, soft-cap, ALiBi, then the window's -inf."""
    def score(qk, rows, cols):
        s = qk * scale
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        if slopes is not None:
            s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
        return s.masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
    return score


def flash_tiled(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Right: query blocks of 32 walk the key tiles of their window under an online softmax, float32 statistics."""
    no_dropout(dropout_p)
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    out, lse = walk(q, qh, kh, vh, L, S, left, right, scorer(scale, softcap, slopes, left, right))
    return finish(q, out, lse, return_attn_probs)


def exp2_core(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes, cap_raw=False):
    """The Triton tutorial's exp2 form, all keys of a row at once: scores times log2(e), exp2, and the base-2 row max
    m2 and sum l. cap_raw caps the unscaled dot product (a bug). Returns out (B, H, L, Dv), m2 + log2(l)."""
    L, S, scale, qh, kh, vh, slopes = prologue(q, k, v, softmax_scale, alibi_slopes)
    left, right = window_of(causal, window_size)
    rows = torch.arange(L, device=q.device) + (S - L)
    cols = torch.arange(S, device=q.device)
    s = qh @ kh.transpose(-2, -1)
    if softcap > 0 and cap_raw:
        s = softcap * torch.tanh(s / softcap)
    s = s * scale
    if softcap > 0 and not cap_raw:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        s = s - slopes * (rows[:, None] - cols[None, :]).abs().to(s.dtype)
    s2 = (s * LOG2E).masked_fill(~tile_keep(rows, cols, left, right), -math.inf)
    m2 = s2.detach().amax(-1, keepdim=True)
    m2 = torch.where(torch.isneginf(m2), 0.0, m2)
    p = torch.exp2(s2 - m2)
    l = p.sum(-1, keepdim=True)
    seen = l > 0
    out = (p @ vh) / torch.where(seen, l, 1.0)
    return out, torch.where(seen, m2 + torch.log2(torch.where(seen, l, 1.0)), -math.inf).squeeze(-1)


def flash_exp2(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
               alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """Right: the exp2 form, the base-2 log-sum-exp converted back to base e before it is returned."""
    no_dropout(dropout_p)
    out, lse2 = exp2_core(q, k, v, softmax_scale, causal, window_size, softcap, alibi_slopes)
    return finish(q, out, lse2 / LOG2E, return_attn_probs)
