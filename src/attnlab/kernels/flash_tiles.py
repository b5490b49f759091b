"""The flash form's tiles: which (query tile, key tile) pairs to compute, and the three steps that make a pair's scores.

:class:`Tiles` says what the mask makes of every pair -- EMPTY (skipped), FULL (no elementwise mask) or PARTIAL
(masked) -- from a mask function's block map (:mod:`attnlab.kernels.masks`) or a mask tensor, and masks a PARTIAL
tile's scores (:meth:`Tiles.mask`). :class:`Keys` is what every query tile of one call walks over: the keys,
their tiles, dropout, and :class:`Score`, how a tile's product becomes its scores. Its steps are the loop's
"score" and "modify" (:meth:`Keys.product`, :meth:`Keys.modify`); the loops themselves are in
:mod:`attnlab.kernels.flash` (forward) and :mod:`attnlab.kernels.flash_backward`. The tags [P1] .. [P13] are the
performance notes in :mod:`attnlab.kernels.flash`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import torch

from . import dropout, online
from .dropout import Dropout
from .masks import EMPTY, FULL, PARTIAL, Mask, tile_slices
from .mods import Fused, Mod, indices
from .online import LN2, LOG2E


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
        self.device = device
        self.dense = dense
        self.has_bias = dense is not None and dense.dtype != torch.bool  # a float mask: scores unbounded
        self.bm = mask_fn.block_map(N, H, L, S, block_q, block_k, device) if mask_fn is not None else None
        self._kinds = self.bm.kind.tolist() if self.bm is not None else None  # [P6] Python ints per tile
        self.mod_in_place = False  # the score modifier changed its input in place in the forward
        self._additive: dict = {}  # [P9] bool tiles as additive ones, for scores known finite
        self._lone: dict = {}  # [P10] per query tile: its rows that see exactly one key, or None

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

    def counts(self) -> dict[str, int] | None:
        """How many tiles per head the mask function's block map makes EMPTY, FULL and PARTIAL (None: no map)."""
        if self._kinds is None:
            return None
        flat = [kind for row in self._kinds for kind in row]
        return {"empty": flat.count(EMPTY), "full": flat.count(FULL), "partial": flat.count(PARTIAL)}

    def kind(self, qt: int, kt: int, rows: slice, cols: slice) -> int:
        if self._kinds is not None:
            return self._kinds[qt][kt]
        if self.dense is None or self.dense.dtype != torch.bool:
            return FULL if self.dense is None else PARTIAL
        t = mask_slice(self.dense, rows, cols)
        return FULL if bool(t.all()) else (PARTIAL if not self.skip_empty or bool(t.any()) else EMPTY)

    def additive(self, qt: int, kt: int, tile: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[P9] A bool tile as 0 where seen, -inf where hidden, made once per call and tile."""
        key = (qt, kt, dtype)
        if key not in self._additive:
            self._additive[key] = torch.zeros(tile.shape, dtype=dtype, device=tile.device).masked_fill_(
                ~tile, float("-inf"))
        return self._additive[key]

    def lone(self, qt: int, rows: slice) -> torch.Tensor | None:
        """[P10] The rows of query tile ``qt`` that see exactly one key, as a bool (Nb, Hb, r) broadcastable
        to (N, H, r); None when no row does (the usual answer, found without a pass over a mask when the
        tile's FULL key tiles alone show at least two keys). Counted once per call and tile."""
        if qt not in self._lone:
            self._lone[qt] = self._count_lone(qt, rows)
        return self._lone[qt]

    def _count_lone(self, qt: int, rows: slice) -> torch.Tensor | None:
        if self.dense is not None:  # a bool mask hides False; a float mask hides -inf
            m = mask_slice(self.dense, rows, slice(None))
            seen = m if m.dtype == torch.bool else m != float("-inf")
            count = seen.expand(*seen.shape[:-1], self.S).sum(dim=-1)
        elif self._kinds is None:  # no mask: every row sees all S keys
            count = torch.full((1, 1, rows.stop - rows.start), self.S, device=self.device)
        else:
            full = sum(c.stop - c.start for kt, c in tile_slices(self.S, self.block_k) if self._kinds[qt][kt] == FULL)
            if full >= 2:
                return None
            count = full
            for kt, kind in enumerate(self._kinds[qt]):
                if kind == PARTIAL:
                    count = count + self.bm.partial[(qt, kt)].sum(dim=-1)
            if not isinstance(count, torch.Tensor):
                count = torch.full((1, 1, rows.stop - rows.start), count, device=self.device)
        lone = count == 1
        return lone if bool(lone.any()) else None

    def tile(self, qt: int, kt: int, rows: slice, cols: slice) -> torch.Tensor:
        """The (Nb, Hb, rows, cols) bool or float mask of a PARTIAL tile."""
        if self.bm is not None:
            return self.bm.partial[(qt, kt)]
        return mask_slice(self.dense, rows, cols)

    def mask(self, s: torch.Tensor, qt: int, kt: int, rows: slice, cols: slice, G: int, finite: bool = False) -> None:
        """-- mask -- A PARTIAL tile's scores s (N, Hkv, G*r, c), in place: -inf where hidden, a float mask added.
        ``finite``: the scores are known finite (the bounded path [P2]), so a bool mask is one add of 0 / -inf [P9]."""
        tile = self.tile(qt, kt, rows, cols)
        if finite and tile.dtype == torch.bool:  # [P9] one add of a cached 0 / -inf tile
            tile = self.additive(qt, kt, tile, s.dtype)
        mask_scores(s, tile, G)


def mask_slice(m: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """Rows and columns of a 4-D mask whose row / column dims may broadcast (size 1)."""
    return m[..., rows if m.shape[-2] > 1 else slice(None), cols if m.shape[-1] > 1 else slice(None)]


def buffer_view(buf: torch.Tensor, shape: tuple) -> torch.Tensor:
    """[P3] The first elements of a flat, reused buffer, as a contiguous tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return buf[:n].view(shape)


def rounded(half_buf: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """[P11] x (float32 weights P or dS) rounded to the half dtype of the reused buffer ``half_buf``, in x's shape:
    FlashAttention's rounding just before a half-precision matmul."""
    return buffer_view(half_buf, tuple(x.shape)).copy_(x)


def mask_scores(s: torch.Tensor, tile: torch.Tensor, G: int) -> None:
    """In place on a tile's scores (N, Hkv, G*r, c): bool tile -> -inf where False; float tile -> added."""
    N, Hkv, _, c = s.shape
    s5 = s.view(N, Hkv, G, -1, c)  # the mask's heads are query heads: h = hk * G + g
    t = tile[:, :, None] if tile.shape[1] == 1 else tile.reshape(tile.shape[0], Hkv, G, *tile.shape[2:])
    if t.dtype == torch.bool:
        s5.masked_fill_(~t, float("-inf"))
    else:
        s5.add_(t.to(s5.dtype), alpha=LOG2E)  # [P8] the scores are in base-2 units


def dropout_keep(drop: Dropout, s: torch.Tensor, G: int, rows: slice, cols: slice) -> torch.Tensor:
    """The dropout keep-mask of one tile of scores s (N, Hkv, G*r, c), scaled by 1/(1-p), in s's shape."""
    N, Hkv = s.shape[:2]
    keep = drop.keep(N, Hkv * G, rows, cols, s.device)  # (N, H, r, c)
    return keep.reshape(s.shape).to(s.dtype) * dropout.factor(drop.p)


def call_mod(mod: Mod, s: torch.Tensor, G: int, rows: slice, cols: slice) -> torch.Tensor:
    """Apply a score modifier to a tile's natural-unit scores (N, Hkv, G*r, c), seen as (N, H, r, c), H = Hkv*G."""
    N, Hkv, _, c = s.shape
    s4 = s.view(N, Hkv * G, -1, c)  # query head h = hk * G + g: the order of the caller's heads
    return mod.apply(s4, *indices(N, Hkv * G, rows.start, rows.stop, cols.start, cols.stop, s.device)).view(s.shape)


@dataclass(frozen=True)
class Buffers:
    """[P3] One call's reused flat buffers, each one tile of scores long: the scores, the modifier's scratch (the
    soft-cap's tanh forward, its slope backward), and the weights rounded to the inputs' half dtype [P11]."""

    scores: torch.Tensor
    scratch: torch.Tensor | None = None
    half: torch.Tensor | None = None

    @classmethod
    def of(cls, like: torch.Tensor, n: int, scratch: bool, half: torch.dtype | None) -> Buffers:
        return cls(like.new_empty(n), like.new_empty(n) if scratch else None,
                   None if half is None else like.new_empty(n, dtype=half))

    def like(self, buf: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
        """The first elements of ``buf`` in x's shape, or None where there is no such buffer."""
        return None if buf is None else buffer_view(buf, tuple(x.shape))


@dataclass(frozen=True)
class Score:
    """How a tile's product becomes its scores: multiplied by ``alpha`` in the matmul, then modified."""

    alpha: float  # [P1] [P8] scale * log2(e), or the fused modifier's own (the soft-cap folds 2 / cap in)
    G: int  # query heads per key head: a tile's rows are its heads' rows, h = hk * G + g
    mod: Mod | None = None
    bound: float | None = None  # bounds |alpha q.k|, where a fused modifier asks for it (the soft-cap's clamp)

    @cached_property
    def fused(self) -> Fused | None:
        """[P12] The modifier when it is fused into the tile instead of called."""
        return self.mod if isinstance(self.mod, Fused) else None

    @cached_property
    def hides(self) -> bool:
        """A modifier called as a function may return -inf: a row of a FULL tile may then see nothing."""
        return self.mod is not None and self.fused is None


@dataclass(frozen=True)
class Keys:
    """What every query tile of one call walks over: the keys, their tiles, dropout, and how scores are made."""

    kT: torch.Tensor  # (N*Hkv, E, S): k transposed, a view where k is contiguous
    tiles: Tiles
    drop: Dropout
    score: Score

    @classmethod
    def of(cls, q: torch.Tensor, k: torch.Tensor, tiles: Tiles, drop: Dropout, mod: Mod | None, scale: float):
        """The keys k (N, Hkv, S, E) of queries q (N, Hkv, G, L, E); their longest with the longest key bounds
        every product, for a fused modifier that asks (the soft-cap skips its clamp below expm1's limit)."""
        fused = mod if isinstance(mod, Fused) else None
        alpha = scale * LOG2E if fused is None else fused.alpha(scale)  # [P1] [P8] [P12]
        bound = online.qk_bound(q, k) * abs(alpha) if fused is not None and fused.wants_bound else None
        kT = k.reshape(k.shape[0] * k.shape[1], *k.shape[2:]).transpose(1, 2)
        return cls(kT, tiles, drop, Score(alpha, q.shape[2], mod, bound))

    def product(self, qi: torch.Tensor, buf: torch.Tensor, cols: slice) -> torch.Tensor:
        """-- score -- [P1] [P3] alpha * qi @ k^T for key tile ``cols``, (N, Hkv, G*r, c), written into ``buf``."""
        N, Hkv, R, E = qi.shape
        c = cols.stop - cols.start
        s = buffer_view(buf, (N * Hkv, R, c))
        if R == 1:  # one query row (decoding): (1, c) is (c, 1) in memory, and k q^T reads k in its own order
            torch.baddbmm(s.view(N * Hkv, c, 1), self.kT.mT[:, cols], qi.reshape(N * Hkv, 1, E).mT,
                          beta=0, alpha=self.score.alpha, out=s.view(N * Hkv, c, 1))
        else:
            torch.baddbmm(s, qi.reshape(N * Hkv, R, E), self.kT[:, :, cols], beta=0, alpha=self.score.alpha, out=s)
        return s.view(N, Hkv, R, -1)

    def modify(self, s: torch.Tensor, rows: slice, cols: slice, bufs: Buffers) -> torch.Tensor:
        """-- modify -- A tile's product s (N, Hkv, G*r, c) to its modified base-2 scores: a fused modifier in place
        [P12], a function called on natural units [P8] (one that changes its input in place is remembered: the
        backward then gives it a copy)."""
        sc = self.score
        if sc.fused is not None:
            s4 = self.heads(s)
            sc.fused.tile(s4, rows, cols, bufs.like(bufs.scratch, s4), sc.bound)
        elif sc.mod is not None:
            raw = s.mul_(LN2)
            version = None if raw.is_inference() else raw._version  # (an inference tensor keeps no version)
            s = call_mod(sc.mod, raw, sc.G, rows, cols)
            if version is not None and raw._version != version:
                self.tiles.mod_in_place = True
            s = s.mul_(LOG2E)
        return s

    def modify_for_grad(self, s: torch.Tensor, rows: slice, cols: slice, bufs: Buffers):
        """:meth:`modify` on the backward's way: (scores, what the chain rule needs). A fused modifier leaves its
        derivative in the scratch buffer where it has one (the soft-cap's slope, per query head); a function runs
        under autograd, and the pair (modified scores, raw scores) carries its graph."""
        sc = self.score
        if sc.fused is not None:
            s4 = self.heads(s)
            slope = bufs.like(bufs.scratch, s4)
            sc.fused.tile(s4, rows, cols, slope, sc.bound, slope=slope is not None)
            return s, slope
        if sc.mod is None:
            return s, None
        raw = s.mul_(LN2).detach().requires_grad_(True)  # [P8] natural units
        with torch.enable_grad():  # a modifier that works in place gets a copy: raw is a leaf of the graph
            modded = call_mod(sc.mod, raw.clone() if self.tiles.mod_in_place else raw, sc.G, rows, cols)
        return modded.detach() * LOG2E, (modded, raw)

    def heads(self, s: torch.Tensor) -> torch.Tensor:
        """A tile's scores (N, Hkv, G*r, c) seen per query head, (N, H, r, c): h = hk * G + g."""
        N, Hkv, _, c = s.shape
        return s.view(N, Hkv * self.score.G, -1, c)

    def keep(self, s: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor | None:
        """The tile's dropout keep-mask scaled by 1/(1-p), in s's shape (N, Hkv, G*r, c); None without dropout."""
        return dropout_keep(self.drop, s, self.score.G, rows, cols) if self.drop.active else None
