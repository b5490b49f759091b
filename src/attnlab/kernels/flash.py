"""Flash attention in plain PyTorch: tiled online softmax with O(L) memory and its own backward.

Read this first: :mod:`attnlab.lab.explore.online_softmax` (``attnlab explore online-softmax``)
runs the same online softmax on ONE query row, one key tile at a time, and records every number.
This file is that loop for every row at once, its backward pass, and the tricks that make it fast.

The matrix form holds all L x S scores at once. This form never does. It walks the keys one tile
at a time, and for every query row keeps three running numbers:

* ``m``   -- the largest score seen so far (the running max),
* ``l``   -- the sum of exp(score - m) so far (the running normaliser),
* ``acc`` -- the sum of exp(score - m) * value so far (the unnormalised output).

When a new tile brings a larger max, everything gathered so far was measured against the old max,
so it is *rescaled* by exp(m_old - m_new) before the tile's own terms are added. After the last
tile, ``acc / l`` is exactly softmax(scores) @ v -- the same numbers the matrix form computes, in
a different order. The forward pass keeps only the output and, per row, the log-sum-exp
``lse = m + log(l)``; the backward pass recomputes each tile's weights from it
(``P = exp(s - lse)``) instead of storing them, following FlashAttention-2:

    dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ += dS K,   dK += dS^T Q

Masks given as functions (:mod:`attnlab.kernels.masks`) compile to a block map, so tiles that no
query can see are skipped outright and tiles that every query sees need no elementwise mask.
Grouped-query attention reads each key/value head once for all the query heads that share it
(the query heads of a group become extra rows), never materialising repeated K and V.

A score modifier (:mod:`attnlab.mods`) is applied to each tile's scores before the mask. The
backward pass applies the chain rule inside the tile: it recomputes the tile's raw scores, runs
the modifier under autograd, and pulls dS back through it to the raw scores and to any tensor the
modifier holds (a bias table, ALiBi slopes) -- one tile at a time, never L x S.

Shapes. The query heads of a group are extra rows: q5 (N, Hkv, G, L, E) is read one query tile
of r rows at a time as ``qi`` (N, Hkv, G*r, E). In the forward loop the running numbers of those
rows are ``m`` and ``l`` (N*Hkv, G*r) and ``acc`` (N*Hkv, G*r, Ev): one batch dimension, so that
``acc += weights @ v`` is one batched matmul into ``acc`` itself.

Performance notes -- each trick is tagged [P1] .. [P9] at its line:

* [P1] The scale is applied by the matmul itself: ``baddbmm(..., beta=0, alpha=scale)`` multiplies
  each finished dot product, for free, instead of a pass over every tile of scores. (Folding it into
  q first, ``q * scale``, is free too, but rounds every element of q before the sum: with large
  logits that tripled the float32 error against PyTorch's; see docs/flash.md.) dK's ``scale`` rides
  on its matmul the same way.
* [P2] The bounded path. For any query row and key, |q.k| <= |q| |k| <= max|q| * max|k| over the
  query tile and the head's keys. When that bound is at most SAFE_LOGIT (40), no score can leave
  [-40, 40], so exp(score) neither overflows nor underflows float32 (about e^-87 .. e^88): the
  running max is not needed and the shift stays 0. Each tile then skips the max, the rescale of
  ``l`` and ``acc`` and the -inf guard (:func:`_bounded_row_block`); every other query tile takes
  the running max (:func:`_online_row_block`). A float mask or a score modifier can move scores
  anywhere, so it always takes the running max.
* [P3] Buffer reuse. Each tile's scores are written by ``matmul(..., out=)`` into one flat buffer
  allocated once per call; :func:`_view` gives the first rows x cols elements of it in the tile's
  shape (edge tiles are smaller). The exp, the mask and dropout then work in place. The backward
  reuses two such buffers (scores and dP). No allocation per tile.
* [P4] A float64 lse, float32 tiles. The saved log-sum-exp is float64 (ring attention merges many
  partial results through it), but subtracting a float64 column from float32 scores would run the
  whole tile in float64 (about 30x slower). With hi = lse rounded to the working dtype,

      exp(s - lse) = exp(s - hi) * exp(hi - lse) = exp(s - hi) * corr,

  so the tile subtracts hi in float32, and corr (about 1) is a per-row factor folded into dO and D,
  which are small (:class:`Weights`).
* [P5] Tiles of 256 x 256 (DEFAULT_BLOCK_Q / DEFAULT_BLOCK_K). Each tile costs about a dozen tensor
  calls whatever its size, so a tile must be large for the arithmetic to outweigh Python and
  dispatch; the memory stays O(tile), never L x S. The flash targets (benchmarks/flash_targets.py)
  are measured with these sizes.
* [P6] The block map's kinds are read once with ``.tolist()`` (:class:`Tiles`): asking "EMPTY,
  FULL or PARTIAL?" is then a Python list lookup per tile instead of indexing a tensor (a dispatch
  and a conversion to a Python int per tile).
* [P7] Q-outer backward. FlashAttention-2 on a GPU runs key tiles in parallel and would need
  atomic adds for dQ. Here the outer loop is over query tiles: each query tile owns its dQ, which
  is complete once its key tiles are walked; dK and dV are summed over the query tiles one after
  the other on the one CPU thread that runs the loop, so no two writes ever race.
* [P8] Base-2 scores. The products are multiplied by scale * log2(e) instead of scale ([P1]), so each score s
  is the true one times log2(e), and exp(true score - m) = exp2(s - m'): the same number. On a CPU
  torch.exp2 runs about three times faster than torch.exp (it only shifts the exponent and
  evaluates a short polynomial): 0.15-0.19 ns against 0.45-0.65 ns per number here, which saves
  about a sixth of the dense forward's time at T = 2048. The running max m, the shift and the
  normaliser stay in these units inside the file; lse is handed out in natural units (times ln 2),
  and a float mask, a score modifier and ring attention's global lse are converted where they meet
  the scores. SAFE_LOGIT bounds the true scores, so the bounded path compares with
  SAFE_LOGIT * log2(e).
* [P9] On the bounded path every score is finite, so a partial tile's bool mask can be *added* as
  a tile of 0 and -inf (made once per call, :meth:`Tiles.additive`): a plain vectorised add, where
  ``masked_fill_`` with the negated, broadcast bool tile cost about 8x as much. (An infinite score
  plus -inf would be NaN, so the running-max path keeps the masked fill.)

Papers: Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness"
(2022); Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning"
(2023). The online softmax: Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import dropout, flash_band
from ._check import check, check_score_mod, empty_output
from .argcheck import positive_int
from .dropout import NO_DROPOUT, Dropout
from .masks import EMPTY, FULL, PARTIAL, Mask, causal, tile_slices
from .mods import Mod, indices

DEFAULT_BLOCK_Q = 256  # [P5]
DEFAULT_BLOCK_K = 256
# exp(+-40) is comfortably inside float32's normal range (about e^-87 .. e^88), and so is a sum of
# millions of such terms; rows whose scores provably stay within it need no running max.
SAFE_LOGIT = 40.0
LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453  # [P8] scores in base-2 units: exp(x) = exp2(x * log2(e))
_CAUSAL = causal()  # one instance, so its compiled block maps are cached across calls


class Tiles:
    """What the mask says about each (query tile, key tile): EMPTY, FULL or PARTIAL, and the mask of a partial one.

    Sources: nothing (every tile FULL), a mask function (its cached block map), or a dense tensor
    (bool: sliced per tile, tiles with no visible key skipped; float: added per tile). With
    ``skip_empty=False`` a dense mask's hidden tiles are computed anyway (weight 0), so that a NaN in
    a hidden value still turns the output NaN, as 0 * NaN does in PyTorch.
    """

    def __init__(self, N, H, L, S, block_q, block_k, mask_fn: Mask | None = None,
                 dense: torch.Tensor | None = None, device="cpu", skip_empty: bool = True):
        self.L, self.S = L, S
        self.block_q, self.block_k = block_q, block_k
        self.skip_empty = skip_empty
        self.dense = dense
        self.has_bias = dense is not None and dense.dtype != torch.bool  # a float mask: scores unbounded
        self.bm = mask_fn.block_map(N, H, L, S, block_q, block_k, device) if mask_fn is not None else None
        self._kinds = self.bm.kind.tolist() if self.bm is not None else None  # [P6] Python ints per tile
        self.band = None  # a flash_band.Plan, when the forward may run as bands instead of tiles
        self._additive: dict = {}  # [P9] bool tiles as additive ones, for scores known finite

    def query_tiles(self) -> Iterator[tuple[int, slice]]:
        """(qt, rows) of every query tile."""
        return tile_slices(self.L, self.block_q)

    def key_tiles(self, qt: int, rows: slice) -> Iterator[tuple[int, slice, int]]:
        """(kt, cols, kind) of every key tile that query tile ``qt`` must compute: EMPTY ones are skipped."""
        for kt, cols in tile_slices(self.S, self.block_k):
            kind = self.kind(qt, kt, rows, cols)
            if kind != EMPTY:
                yield kt, cols, kind

    def scores(self) -> int:
        """How many scores per head the tile walk computes: every tile the mask does not skip."""
        if self._kinds is None:
            return self.L * self.S
        return sum(kind != EMPTY for row in self._kinds for kind in row) * self.block_q * self.block_k

    def kind(self, qt: int, kt: int, rows: slice, cols: slice) -> int:
        if self._kinds is not None:
            return self._kinds[qt][kt]
        if self.dense is None or self.dense.dtype != torch.bool:
            return FULL if self.dense is None else PARTIAL
        t = _slice(self.dense, rows, cols)
        return FULL if bool(t.all()) else (PARTIAL if not self.skip_empty or bool(t.any()) else EMPTY)

    def additive(self, qt: int, kt: int, tile: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[P9] A bool tile as 0 where seen, -inf where hidden, made once per call and tile."""
        key = (qt, kt, dtype)
        if key not in self._additive:
            self._additive[key] = torch.zeros(tile.shape, dtype=dtype, device=tile.device).masked_fill_(
                ~tile, float("-inf"))
        return self._additive[key]

    def tile(self, qt: int, kt: int, rows: slice, cols: slice) -> torch.Tensor:
        """The (Nb, Hb, rows, cols) bool or float mask of a PARTIAL tile."""
        if self.bm is not None:
            return self.bm.partial[(qt, kt)]
        return _slice(self.dense, rows, cols)


def _slice(m: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """Rows and columns of a 4-D mask whose row / column dims may broadcast (size 1)."""
    return m[..., rows if m.shape[-2] > 1 else slice(None), cols if m.shape[-1] > 1 else slice(None)]


def _view(buf: torch.Tensor, shape: tuple) -> torch.Tensor:
    """[P3] The first elements of a flat, reused buffer, as a contiguous tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return buf[:n].view(shape)


def _mask_scores(s: torch.Tensor, tile: torch.Tensor, G: int) -> None:
    """In place on a tile's scores (N, Hkv, G*r, c): bool tile -> -inf where False; float tile -> added."""
    N, Hkv, _, c = s.shape
    s5 = s.view(N, Hkv, G, -1, c)  # the mask's heads are query heads: h = hk * G + g
    t = tile[:, :, None] if tile.shape[1] == 1 else tile.reshape(tile.shape[0], Hkv, G, *tile.shape[2:])
    if t.dtype == torch.bool:
        s5.masked_fill_(~t, float("-inf"))
    else:
        s5.add_(t.to(s5.dtype), alpha=LOG2E)  # [P8] the scores are in base-2 units


def _keep(drop: Dropout, s: torch.Tensor, G: int, rows: slice, cols: slice) -> torch.Tensor:
    """The dropout keep-mask of one tile of scores s (N, Hkv, G*r, c), scaled by 1/(1-p), in s's shape."""
    N, Hkv = s.shape[:2]
    keep = drop.keep(N, Hkv * G, rows, cols, s.device)  # (N, H, r, c)
    return keep.reshape(s.shape).to(s.dtype) * dropout.factor(drop.p)


def _modify(mod: Mod, s: torch.Tensor, G: int, rows: slice, cols: slice) -> torch.Tensor:
    """Apply a score modifier to a tile's natural-unit scores (N, Hkv, G*r, c), seen as (N, H, r, c), H = Hkv*G."""
    N, Hkv, _, c = s.shape
    s4 = s.view(N, Hkv * G, -1, c)  # query head h = hk * G + g: the order of the caller's heads
    return mod.apply(s4, *indices(N, Hkv * G, rows.start, rows.stop, cols.start, cols.stop, s.device)).view(s.shape)


@dataclass(frozen=True)
class _Keys:
    """What every query tile of one call walks over: keys, values, the tile map, dropout and the modifier."""

    k: torch.Tensor  # (N, Hkv, S, E)
    kT3: torch.Tensor  # (N*Hkv, E, S)
    v: torch.Tensor  # (N, Hkv, S, Ev)
    tiles: Tiles
    drop: Dropout
    mod: Mod | None
    G: int  # query heads per key head
    alpha: float  # [P1] [P8] scale * log2(e): what each dot product is multiplied by

    @classmethod
    def of(cls, k, v, tiles, drop, mod, G, scale) -> _Keys:
        kT3 = k.reshape(k.shape[0] * k.shape[1], *k.shape[2:]).transpose(1, 2)  # (N*Hkv, E, S)
        return cls(k, kT3, v, tiles, drop, mod, G, scale * LOG2E)

    def product(self, qi: torch.Tensor, buf: torch.Tensor, cols: slice) -> torch.Tensor:
        """[P1] [P3] alpha * qi @ k^T for key tile ``cols``, (N, Hkv, G*r, c), written into ``buf``."""
        N, Hkv, R, E = qi.shape
        s = _view(buf, (N * Hkv, R, cols.stop - cols.start))
        torch.baddbmm(s, qi.reshape(N * Hkv, R, E), self.kT3[:, :, cols], beta=0, alpha=self.alpha, out=s)
        return s.view(N, Hkv, R, -1)

    def scores(self, qi: torch.Tensor, buf: torch.Tensor, qt, rows, kt, cols, kind, finite=False) -> torch.Tensor:
        """-- 1. scores -- of query tile qi (N, Hkv, G*r, E) against key tile ``cols``: modified, then masked.
        ``finite``: the scores are known finite (the bounded path), so a bool mask may be added as 0 / -inf."""
        s = self.product(qi, buf, cols)
        if self.mod is not None:  # [P8] the modifier sees natural units
            s = _modify(self.mod, s.mul_(LN2), self.G, rows, cols).mul_(LOG2E)
        if kind == PARTIAL:
            tile = self.tiles.tile(qt, kt, rows, cols)
            if finite and tile.dtype == torch.bool:  # [P9] one add of a cached 0 / -inf tile
                tile = self.tiles.additive(qt, kt, tile, s.dtype)
            _mask_scores(s, tile, self.G)
        return s

    def walk(self, qi: torch.Tensor, buf: torch.Tensor, qt: int, rows: slice, finite: bool = False):
        """(cols, kind, s, s3) of each computed key tile: its scores s (N, Hkv, G*r, c) and s3, the same
        memory as (N*Hkv, G*r, c)."""
        NH, R = qi.shape[0] * qi.shape[1], qi.shape[2]
        for kt, cols, kind in self.tiles.key_tiles(qt, rows):
            s = self.scores(qi, buf, qt, rows, kt, cols, kind, finite)
            yield cols, kind, s, s.view(NH, R, -1)


# ---- forward ------------------------------------------------------------------------------------------------


def forward_tiles(q5, k, v, scale, tiles: Tiles, drop: Dropout = NO_DROPOUT, mod: Mod | None = None,
                  keep_norm=False):
    """Online-softmax forward. q5 (N, Hkv, G, L, E), k (N, Hkv, S, E), v (N, Hkv, S, Ev).

    Returns ``out`` (N, Hkv, G, L, Ev) and ``lse`` (N, Hkv, G, L, float64); rows with no visible key
    get out = 0 and lse = -inf. ``drop`` places this block in a larger problem for dropout (ring
    attention); a score modifier ``mod`` sees this block's own positions.
    ``keep_norm=True`` also returns ``(m, l)`` (N, Hkv, G, L) in the working dtype, each row's final
    shift and normaliser, so that backward can rebuild the weights exactly as forward divided them.
    """
    N, Hkv, G, L, E = q5.shape
    S, Ev = k.shape[2], v.shape[3]
    out = q5.new_empty(N, Hkv, G, L, Ev)
    lse = q5.new_empty(N, Hkv, G, L, dtype=torch.float64)
    norm = (q5.new_empty(N, Hkv, G, L), q5.new_empty(N, Hkv, G, L)) if keep_norm else None
    keys = _Keys.of(k, v, tiles, drop, mod, G, scale)
    buf = q5.new_empty(N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, S))  # [P3] one score tile
    k_norm = k.norm(dim=-1).amax(dim=-1, keepdim=True)  # (N, Hkv, 1): the longest key of each head
    for qt, rows in tiles.query_tiles():
        # -- 1. this query tile (its query heads' rows together) --
        qi = q5[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)
        # -- 2. walk its key tiles: the bounded path when no score can leave [-SAFE_LOGIT, SAFE_LOGIT] --
        bounded = (not tiles.has_bias and mod is None
                   and float((qi.norm(dim=-1) * k_norm).max()) * abs(scale) <= SAFE_LOGIT)
        if bounded:  # [P2]
            m, l, acc = _bounded_row_block(qi, keys, buf, qt, rows)
        else:
            m, l, acc = _online_row_block(qi, keys, buf, qt, rows)
        # -- 3. normalise, and keep what backward needs --
        tile_norm = None if norm is None else (norm[0][:, :, :, rows], norm[1][:, :, :, rows])
        _finish(out[:, :, :, rows], lse[:, :, :, rows], tile_norm, m, l, acc)
    if keep_norm:
        return out, lse, norm
    return out, lse


def _bounded_row_block(qi, keys: _Keys, buf, qt: int, rows: slice):
    """[P2] One query tile's (m, l, acc) with shift 0: every score is within [-SAFE_LOGIT, SAFE_LOGIT]."""
    l, acc, v3 = _sums(qi, keys)
    for cols, _, s, s3 in keys.walk(qi, buf, qt, rows, finite=True):  # -- 1. scores for each key tile (masked) --
        # -- 2. weights exp(score - 0), in place: no max, no rescale --
        s.exp2_()  # [P8]
        # -- 3. into the running sums --
        _gather(l, acc, s, s3, v3, keys, rows, cols)
    return torch.zeros_like(l), l, acc


def _online_row_block(qi, keys: _Keys, buf, qt: int, rows: slice):
    """One query tile's (m, l, acc) with the running max: what the online softmax is."""
    l, acc, v3 = _sums(qi, keys)
    m = torch.full_like(l, float("-inf"))  # running max (the shift)
    for cols, kind, s, s3 in keys.walk(qi, buf, qt, rows):  # -- 1. scores for each key tile (modified, masked) --
        # -- 2. the new running max, and the weights exp(score - m_new) in place --
        m_new = torch.maximum(m, s3.amax(dim=-1))
        if kind == PARTIAL:  # a row may have seen nothing yet: keep exp(-inf - -inf) from making NaN
            m_new = torch.where(torch.isneginf(m_new), 0.0, m_new)
        s3.sub_(m_new.unsqueeze(-1)).exp2_()
        # -- 3. rescale what was gathered against the old max --
        alpha = torch.exp2(m - m_new)
        l.mul_(alpha)
        acc.mul_(alpha.unsqueeze(-1))
        m = m_new
        # -- 4. into the running sums --
        _gather(l, acc, s, s3, v3, keys, rows, cols)
    return m, l, acc


def _sums(qi, keys: _Keys):
    """Zero running sums for query tile qi (N, Hkv, G*r, E): l (N*Hkv, G*r) and acc (N*Hkv, G*r, Ev);
    and v seen as (N*Hkv, S, Ev)."""
    N, Hkv, R, _ = qi.shape
    v3 = keys.v.reshape(N * Hkv, *keys.v.shape[2:])
    return qi.new_zeros(N * Hkv, R), qi.new_zeros(N * Hkv, R, v3.shape[-1]), v3


def _gather(l, acc, s, s3, v3, keys: _Keys, rows: slice, cols: slice) -> None:
    """Add a tile's weights (s, and s3 its (N*Hkv, G*r, c) view) to the running sums, in place."""
    l.add_(s3.sum(dim=-1))  # the normaliser counts the weights before dropout
    if keys.drop.active:
        s.mul_(_keep(keys.drop, s, keys.G, rows, cols))
    acc.baddbmm_(s3, v3[:, cols])  # acc += weights @ v


def _finish(out, lse, norm, m, l, acc) -> None:
    """Write one query tile's output acc / l, its lse = m + log(l) (float64) and, if asked, its (m, l).

    ``out`` (N, Hkv, G, r, Ev), ``lse`` and ``norm``'s pair (N, Hkv, G, r) are the tile's slices of
    the results; ``m``, ``l`` (N*Hkv, G*r) and ``acc`` (N*Hkv, G*r, Ev) its running numbers. A row
    that saw no key has l = 0: its output is 0 (not 0/0) and its lse -inf.
    """
    dead = l == 0
    l = l.unsqueeze(-1)
    out.copy_((acc / torch.where(l == 0, 1.0, l)).view(out.shape))
    if norm is not None:  # dead rows: shift 0 and normaliser 1, so that backward's exp(-inf - 0) / 1 = 0
        norm[0].copy_(torch.where(torch.isneginf(m), 0.0, m).view(norm[0].shape))
        norm[1].copy_(torch.where(l == 0, 1.0, l).view(norm[1].shape))
    m = torch.where(dead, float("-inf"), m)
    lse.copy_(((m.double() + torch.log2(l.double()).squeeze(-1)) * LN2).view(lse.shape))  # [P8] natural units out


# ---- backward -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Weights:
    """How backward rebuilds each row's weights, per row (N, Hkv, G, L):

        P = exp(s - shift) / norm,   with dO and D multiplied by corr

    (s, shift and hi in base-2 units, as forward's scores: P = exp2(s - shift) / norm [P8]).

    :meth:`from_norm` (the flash form: this block's own forward): shift = m and norm = l, so P is
    exactly what forward divided (a lone key's weight is e / e = 1, not exp(s - lse) = 1 +- ulp), and
    D is summed from that very P and dP (``D=None``), so that dS = P * (dP - D) cancels where the true
    gradient is zero. :meth:`from_lse` (ring attention: the global float64 lse and D): [P4]
    exp(s - lse) = exp(s - hi) * exp(hi - lse), with hi = lse in the working dtype and
    corr = exp(hi - lse) ~ 1.
    """

    shift: torch.Tensor
    corr: torch.Tensor | None = None
    norm: torch.Tensor | None = None
    D: torch.Tensor | None = None  # rowsum(dO * O); None: summed as rowsum(P * dP) in a first pass

    @classmethod
    def from_norm(cls, m: torch.Tensor, l: torch.Tensor) -> Weights:
        return cls(m, norm=l)

    @classmethod
    def from_lse(cls, lse: torch.Tensor, D: torch.Tensor | None, dtype: torch.dtype) -> Weights:
        lse2 = lse * LOG2E  # [P8] base-2 units, as the scores
        hi = torch.where(torch.isneginf(lse2), float("inf"), lse2).to(dtype)  # [P4]; dead rows: P = exp(-inf) = 0
        corr = torch.exp2(hi.double() - lse2).to(dtype)
        return cls(hi, torch.where(torch.isfinite(corr), corr, 1.0), None, D)

    def rows(self, rows: slice, dout: torch.Tensor):
        """One query tile's (c * dO, shift, norm or None, c * D or None), rows as (N, Hkv, G*r, .)."""
        N, Hkv, G = dout.shape[:3]
        R = G * (rows.stop - rows.start)

        def cut(t):
            return None if t is None else t[:, :, :, rows].reshape(N, Hkv, R, 1)

        c = cut(self.corr)
        doi = dout[:, :, :, rows].reshape(N, Hkv, R, dout.shape[-1])
        Di = cut(self.D)
        if c is not None:
            doi = doi * c
            Di = None if Di is None else Di * c
        return doi, cut(self.shift), cut(self.norm), Di


def backward_tiles(q5, k, v, dout, scale, tiles: Tiles, weights: Weights, drop: Dropout = NO_DROPOUT,
                   mod: Mod | None = None, *, bias_shape=None, mod_params=()):
    """FlashAttention-2 backward by recomputation. Returns dq5, dk, dv and (if ``bias_shape``) dbias.

    ``weights`` says how each tile's weights are rebuilt (:class:`Weights`). With a score modifier
    ``mod``, dS is pulled back through it tile by tile, and the gradients of the tensors in
    ``mod_params`` are returned as a fifth item (a list). [P7] The outer loop is over query tiles.
    """
    N, Hkv, G, L, E = q5.shape
    dq5, dk, dv = torch.zeros_like(q5), torch.zeros_like(k), torch.zeros_like(v)
    dk3 = dk.view(N * Hkv, *dk.shape[2:])  # (N*Hkv, S, E): the same memory, for batched matmuls
    dbias = q5.new_zeros(bias_shape) if bias_shape is not None else None
    dparams = [None] * len(mod_params)
    keys = _Keys.of(k, v, tiles, drop, mod, G, scale)
    n = N * Hkv * G * min(tiles.block_q, L) * min(tiles.block_k, k.shape[2])
    bufs = (q5.new_empty(n), q5.new_empty(n))  # [P3] scores and dP, reused: no allocation per tile
    for qt, rows in tiles.query_tiles():
        # -- 1. this query tile, and its rows' saved numbers --
        qi = q5[:, :, :, rows].reshape(N, Hkv, G * (rows.stop - rows.start), E)
        doi, shift, norm, Di = weights.rows(rows, dout)
        # [P1] the scores by the same product as forward's: P is rebuilt bit for bit (tile forward)
        walk = (qi, doi, shift, norm, keys, bufs, qt, rows)
        # -- 2. D = rowsum(P * dP), from the same P and dP as below, so that dP - D cancels where it should --
        if Di is None:
            Di = q5.new_zeros(*qi.shape[:3], 1)
            for _, P, dP, _, _ in _key_tiles(*walk):
                Di.add_(P.mul_(dP).sum(dim=-1, keepdim=True))  # P is rebuilt in the next pass
        # -- 3. each key tile: dV, dS, then dQ (this tile's own) and dK --
        dqi = torch.zeros_like(qi)
        for cols, P, dP, keep, through in _key_tiles(*walk):
            dv[:, :, cols] += torch.matmul((P if keep is None else P * keep).transpose(-2, -1), doi)
            dS = dP.sub_(Di).mul_(P)  # dS = P * (dP - D)
            if dbias is not None:
                _add_bias_grad(dbias, dS.view(N, Hkv * G, -1, dS.shape[-1]), rows, cols)
            if through is not None:  # chain rule through the modifier: dS to the raw scores and its tensors
                dS, dparams = _through_mod(*through, mod_params, dS, dparams)
            dqi.add_(torch.matmul(dS, k[:, :, cols]))
            R = qi.shape[2]
            dk3[:, cols].baddbmm_(dS.view(N * Hkv, R, -1).transpose(1, 2), qi.reshape(N * Hkv, R, E),
                                  alpha=scale)  # [P1] dk += scale * dS^T q
        dq5[:, :, :, rows] = (dqi * scale).view(N, Hkv, G, rows.stop - rows.start, E)
    if mod is not None:
        return dq5, dk, dv, dbias, dparams
    return dq5, dk, dv, dbias


def _key_tiles(qi, doi, shift, norm, keys: _Keys, bufs, qt: int, rows: slice):
    """Each computed key tile of one query tile: (cols, P, dP, keep, through), weights rebuilt, dP = c dO V^T.

    ``qi`` (N, Hkv, G*r, E) is the query tile (its scores: :meth:`_Keys.product`); ``shift`` / ``norm``
    (N, Hkv, G*r, 1) rebuild P (:class:`Weights`). P and dP live in the two reused buffers ``bufs``: use
    them before the next.
    With a score modifier, ``through`` is (modified scores, raw scores) with the graph between them,
    for the chain rule; else None.
    """
    for kt, cols, kind in keys.tiles.key_tiles(qt, rows):
        # -- 1. scores, through the modifier under autograd when there is one --
        if keys.mod is None:
            s, through = keys.scores(qi, bufs[0], qt, rows, kt, cols, kind), None
        else:
            raw = keys.product(qi, bufs[0], cols).mul_(LN2).detach().requires_grad_(True)  # [P8] natural units
            with torch.enable_grad():
                modded = _modify(keys.mod, raw, keys.G, rows, cols)
            s, through = modded.detach() * LOG2E, (modded, raw)
            if kind == PARTIAL:
                _mask_scores(s, keys.tiles.tile(qt, kt, rows, cols), keys.G)
        # -- 2. the tile's weights, recomputed from the saved shift (and normaliser) --
        P = s.sub_(shift).exp2_()  # [P8]
        if norm is not None:
            P.div_(norm)  # exp(s - m) / l, divided as forward divided: a lone key's weight is exactly 1
        # -- 3. dP = dO V^T, dropped where forward dropped --
        dP = torch.matmul(doi, keys.v[:, :, cols].transpose(-2, -1), out=_view(bufs[1], P.shape))
        keep = _keep(keys.drop, s, keys.G, rows, cols) if keys.drop.active else None
        if keep is not None:
            dP.mul_(keep)
        yield cols, P, dP, keep, through


def _through_mod(modded, raw, params, dS, dparams):
    """Backpropagate dS (w.r.t. the modified scores) through the modifier: d raw scores, and add to d params."""
    want = [t for t in params if t is not None]
    grads = torch.autograd.grad(modded, [raw, *want], dS, allow_unused=True)
    it = iter(grads[1:])
    for i, t in enumerate(params):
        if t is None:
            continue
        g = next(it)
        if g is not None:
            dparams[i] = g if dparams[i] is None else dparams[i] + g
    return grads[0], dparams


def _add_bias_grad(dbias: torch.Tensor, dS: torch.Tensor, rows: slice, cols: slice) -> None:
    """Add a tile's dS (N, H, r, c) to the gradient of a float mask, summed over its broadcast dims."""
    dims = [d for d in range(4) if dbias.shape[d] == 1 and dS.shape[d] != 1]
    g = dS.sum(dim=dims, keepdim=True) if dims else dS
    _slice(dbias, rows, cols).add_(g)


# ---- the form -----------------------------------------------------------------------------------------------


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K,
              score_mod=None, bands: bool = True):
    """The flash form. ``block_q`` / ``block_k``: tile sizes (any L, S; tiles need not divide them).

    ``bands``: with a sparse mask function (a sliding window, documents), run the forward as one
    contiguous key band per query tile (:mod:`attnlab.kernels.flash_band`); False walks the tiles.

    ``score_mod(score, b, h, q_idx, kv_idx)`` (:mod:`attnlab.mods`) changes each tile's scaled scores
    before the mask; gradients reach q, k, v and the tensors the modifier holds.
    """
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mod = check_score_mod(score_mod)
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        positive_int(name, b, "a positive integer tile size")
    if a.trivial:  # an empty dim: nothing to attend to
        return a.unflatten(empty_output(a))
    work = a.work
    q5 = a.q.to(work).reshape(a.N, a.Hkv, a.groups, a.L, a.E)  # query heads grouped by their key head
    k, v = a.k.to(work).contiguous(), a.v.to(work).contiguous()
    mask_fn = _CAUSAL if a.is_causal else a.mask
    bias = a.attn_mask.to(work) if a.attn_mask is not None and a.attn_mask.dtype != torch.bool else None
    dense = a.attn_mask if bias is None else bias
    skip = dense is None or bool(torch.isfinite(v).all())  # hidden NaN values must still reach the output
    tiles = Tiles(a.N, a.H, a.L, a.S, min(block_q, a.L), min(block_k, a.S), mask_fn, dense, a.q.device, skip)
    if bands and mask_fn is not None and dense is None and mod is None and a.dropout_p == 0:
        band = flash_band.plan(mask_fn, a.N, a.H, a.L, a.S, flash_band.BAND_BLOCK_Q, a.q.device)
        if band is not None and band.scores <= flash_band.SHARE_OF_TILES * tiles.scores():
            tiles.band = band  # documents aligned to the tiles: the tile walk has no waste to save
    drop = Dropout(dropout.draw_seed(), a.dropout_p) if a.dropout_p > 0 else NO_DROPOUT
    params = mod.params if mod is not None else ()
    out5, _, _ = Flash.apply(q5, k, v, bias, tiles, a.scale, drop, mod, *params)  # (N, Hkv, G, L, Ev)
    return a.unflatten(out5.reshape(a.N, a.H, a.L, a.Ev).to(a.q.dtype))


from .flash_function import Flash  # noqa: E402 -- the autograd Functions build on the tile loops above
