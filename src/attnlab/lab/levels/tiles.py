"""A tiled forward with every step switchable: what a tiled forward with one slip returns (levels 4 and 7).

:func:`forward` walks tiles of queries against tiles of keys as the learner's level 4 forward and
level 7 kernel do, keeping each row's running max m, sum l and accumulator acc, and returns
``{"out", "lse"}``. A :class:`Slip` switches one step to what a learner gets wrong there: the
rescale left out, the max used before it is updated, a tile skipped that holds keys a query sees,
the mask taken inside the tile, a loop bound one tile short, zero keys past the end left unmasked.
Its answer is computed on the probe's own inputs, in their dtype, so an overflow the slip causes in
float32 happens here too; a row that ends with no weight at all comes out NaN (0 / 0), as it does
in the learner's code, and is read as saying nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class Slip:
    """One step of the tiled forward done wrong (the defaults: every step right)."""

    rescale_acc: bool = True  # acc *= exp(m_old - m_new)
    rescale_sum: bool = True  # l *= exp(m_old - m_new)
    carry_max: bool = True  # m = max(m, the tile's max), not the tile's max alone
    rescaled: bool = False  # ... with carry_max False: the rescale exp(m - m_new) still taken, unguarded (right
    # until a tile's max falls far below the last one's, or a tile hides a row's every key: inf, then NaN)
    stale: str | None = None  # exp(s - m) with m before its update: m starts at "-inf" (guarded: 0 there), "zero",
    # or "first-new" (-inf, and the first tile guarded with the new max: where(m == -inf, m_new, m))
    after: bool = False  # the rescale computed after m is updated: exp(m_new - m_new) = 1
    update_max: bool = True  # m = m_new at the end of each tile (False: m stays -inf, so exp(m - m_new) = 0 wipes
    # the sum and the output at every tile, and the lse m + log(l) is -inf)
    last_keys: bool = True  # the last, partial tile of keys is visited
    local: str | None = None  # the causal mask compares places inside the tile: "keys", "rows" or "both"
    skip: str | None = None  # which key tiles a causal forward skips (see SKIPS); None: the right ones
    skip_always: bool = False  # tiles skipped even when is_causal is False
    causal: str = "right"  # "none": no elementwise mask (tiles still skipped); "always": masked when not causal too;
    # "reversed": the keys before the query hidden (j < i); "ahead": one key ahead seen (j <= i + 1); "diagonal": the
    # diagonal hidden too (j < i); the tiles skipped as they should be
    bound: str | None = None  # a loop bound over key tiles under is_causal (see BOUNDS); None: the right one
    pad: bool = False  # keys past S, loaded as zeros, are not masked (a kernel's tile edge)
    edge: int = 0  # the edge mask lets this many keys past S through (offs_n > S: key S, a zero, scores 0)
    edge_len: bool = False  # the edge mask compares the keys with L, not S (a zero key past S seen, or keys
    # from L on hidden)
    divide: str = "end"  # out = acc / l at the end; "never"; "per-tile": each tile's own softmax merged into acc;
    # "columns": acc / l broadcast along the wrong axis (column e divided by row e's sum: only where BLOCK_EV = BLOCK_M)
    alpha: str = "right"  # the rescale exp(m_old - m_new); "inverted": exp(m_new - m_old)
    lse: str = "right"  # "sum": log(l) alone; "max": m alone; "base2": m + log2(l) with scores in base 2; "mixed":
    # scores in base 2 but m + ln(l) (a base-2 max, a natural log); "log2-sum": natural scores, m + log2(l)
    fill: float = -math.inf  # what the hidden scores (past S, and the causal mask's) are set to: 0.0 gives them
    # weight exp(0 - m), as tl.where(mask, s, 0.0) does


# a key tile [j0, j0 + Bk) skipped by a query tile [i0, i0 + Bq) under is_causal: right, and as learners write it
SKIPS = {
    None: lambda i0, bq, j0, bk: j0 > i0 + bq - 1,  # wholly after the tile's last query
    "diagonal": lambda i0, bq, j0, bk: j0 >= i0,  # the tile that holds the diagonal skipped too
    "partial": lambda i0, bq, j0, bk: j0 + bk - 1 > i0,  # every tile not wholly visible to the first query
    "first-query": lambda i0, bq, j0, bk: j0 > i0,  # right only when block_q == block_k
    "tile-number": lambda i0, bq, j0, bk: j0 // bk > i0 // bq,  # tile numbers compared: right only when equal
    "never": lambda i0, bq, j0, bk: False,  # no skip: the loop's bound alone says which tiles are visited
}
# a kernel's loop bound over the keys for the query tile [i0, i0 + Bq): right, and as learners write it
BOUNDS = {
    None: lambda i0, bq, bk, S: min(S, i0 + bq),
    "short": lambda i0, bq, bk, S: min(S, i0),  # stops before the tile's own diagonal
    "block-n": lambda i0, bq, bk, S: min(S, (i0 // bq + 1) * bk),  # BLOCK_N where BLOCK_M belongs
    "one-short": lambda i0, bq, bk, S: min(S, i0 + bq - 1),  # the tile's last query's own key left out
    "plus-block-k": lambda i0, bq, bk, S: min(S, i0 + bk),  # a key tile past the first query: short when Bq > Bk
    # to the tile's last query, not clamped to S: the tiles past the end are visited, every key masked -- harmless
    # where the running max is kept, the last tile (an empty one) all there is where it is not
    "past-end": lambda i0, bq, bk, S: i0 + bq,
}


def forward(q, k, v, causal: bool, block_q: int, block_k: int, slip: Slip = Slip(), scale: float | None = None):
    """``{"out": (..., L, Ev), "lse": (..., L)}`` of a tiled forward with ``slip``, in q's dtype."""
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    sc = 1.0 / math.sqrt(E) if scale is None else scale
    if slip.edge_len:  # (keys from L on masked: L - S past S where L > S, S - L before it where L < S)
        slip = replace(slip, edge=slip.edge + L - S, edge_len=False)
    past = slip.bound == "past-end" and causal  # (the keys a causal loop to the tile's end reads: zeros past S)
    if (slip.pad or slip.edge or slip.fill != -math.inf or past) and (S % block_k or past):
        # a kernel's last tile reads zeros past S (a loop past the end: up to the last query tile's end, whole tiles)
        end = -(-L // block_q) * block_q
        extra = max(0, -(-end // block_k) * block_k - S) if past else block_k - S % block_k
        k = torch.cat([k, k.new_zeros(*k.shape[:-2], extra, k.shape[-1])], dim=-2)
        v = torch.cat([v, v.new_zeros(*v.shape[:-2], extra, v.shape[-1])], dim=-2)
    outs, lses = [], []
    for i0 in range(0, L, block_q):
        o, s = _query_tile(q[..., i0:i0 + block_q, :], k, v, i0, S, causal, block_q, block_k, slip, sc)
        if o is None or o.shape[-2] != min(block_q, L - i0):
            return None
        outs.append(o)
        lses.append(s)
    return {"out": torch.cat(outs, dim=-2), "lse": torch.cat(lses, dim=-1)}


def _keys(i0: int, bq: int, S: int, n_keys: int, causal: bool, block_k: int, slip: Slip) -> list[int]:
    """The first key of each key tile the query tile at i0 visits."""
    stop = n_keys if slip.last_keys else S - S % block_k
    if causal and slip.bound is not None:
        stop = BOUNDS[slip.bound](i0, bq, block_k, n_keys if slip.pad else S)
    starts = range(0, stop, block_k)
    if causal or slip.skip_always:
        starts = [j0 for j0 in starts if not SKIPS[slip.skip](i0, bq, j0, block_k)]
    return list(starts)


def _query_tile(qb, k, v, i0, S, causal, bq_max, block_k, slip: Slip, sc: float):
    Bq = qb.shape[-2]
    rows = torch.arange(i0, i0 + Bq).unsqueeze(-1)  # (Bq, 1)
    start = 0.0 if slip.stale == "zero" else -math.inf
    m = torch.full((*qb.shape[:-1], 1), start, dtype=qb.dtype)
    total = torch.zeros_like(m)
    acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=qb.dtype)
    base = 1.0 / math.log(2.0) if slip.lse in ("base2", "mixed") else 1.0  # scores in base 2, for exp2
    for j0 in _keys(i0, bq_max, S, k.shape[-2], causal, block_k, slip):
        kb, vb = k[..., j0:j0 + block_k, :], v[..., j0:j0 + block_k, :]
        s = (qb @ kb.transpose(-2, -1)) * sc * base  # (..., Bq, Bk)
        cols = torch.arange(j0, j0 + kb.shape[-2])
        s = _mask(s, rows, cols, i0, j0, S, causal, slip)
        top = s.amax(dim=-1, keepdim=True)
        new = torch.maximum(m, top) if slip.carry_max else top
        safe = torch.where(torch.isinf(new), 0.0, new)
        p = _exp(s - _against(m, new, safe, slip.stale), base)
        alpha = _exp(safe - m if slip.alpha == "inverted" else m - safe, base) if slip.carry_max else torch.ones_like(m)
        if slip.rescaled:  # the tile's max alone, its exps and the rescale taken against it as a kernel writes them
            p, alpha = _exp(s - new, base), _exp(m - new, base)
        if slip.after:
            alpha = torch.ones_like(m)
        tile_sum = p.sum(dim=-1, keepdim=True)
        total = (total * alpha if slip.rescale_sum else total) + tile_sum
        acc = (acc * alpha if slip.rescale_acc else acc) + (p / tile_sum if slip.divide == "per-tile" else p) @ vb
        m = new if slip.update_max else m
    out = _finish(acc, total, slip)
    if out is None:
        return None, None
    log = torch.log2 if slip.lse == "base2" else torch.log
    lse = {"right": m + log(total), "base2": m + log(total), "mixed": m + torch.log(total), "sum": log(total),
           "max": m, "log2-sum": m + torch.log2(total)}[slip.lse]
    return out, lse[..., 0]


def _against(m, new, safe, stale: str | None):
    """The max a tile's exp(s - .) is taken against: the new one, or (a stale max) the one before this tile --
    guarded where it is still -inf by 0, or by the new max (the first tile right, the later ones stale)."""
    if not stale:
        return safe
    if stale == "first-new":
        return torch.where(torch.isinf(m), safe, m)
    return torch.where(torch.isinf(m), 0.0, m) if stale != "zero" else m


def _finish(acc, total, slip: Slip):
    if slip.divide in ("never", "per-tile"):
        return acc
    if slip.divide == "columns":  # acc (.., Bq, Ev) / l (.., Bq) as a row: entry (r, e) over row e's sum
        width = max(16, 1 << (acc.shape[-1] - 1).bit_length())  # the kernel's BLOCK_EV
        if width != acc.shape[-2] or acc.shape[-1] > acc.shape[-2]:
            return None  # (other widths do not broadcast: the learner's kernel raised there)
        return acc / total[..., : acc.shape[-1], 0].unsqueeze(-2)
    return acc / total


def _exp(x, base: float):
    return torch.exp2(x) if base != 1.0 else torch.exp(x)


def _mask(s, rows, cols, i0, j0, S, causal, slip: Slip):
    """The tile's scores with the hidden keys at -inf: past S (unless ``slip.pad``), and the causal mask."""
    if not slip.pad:
        s = s.masked_fill(cols >= S + slip.edge, slip.fill)
    on = (causal and slip.causal != "none") or slip.causal == "always"
    if not on:
        return s
    r = rows - i0 if slip.local in ("rows", "both") else rows
    c = cols - j0 if slip.local in ("keys", "both") else cols
    hide = {"reversed": lambda: c < r, "ahead": lambda: c > r + 1, "diagonal": lambda: c >= r}.get(slip.causal,
                                                                                                 lambda: c > r)()
    return s.masked_fill(hide, slip.fill)
