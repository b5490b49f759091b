"""The flash form's tiles: which (query tile, key tile) pairs to compute, and each pair's scores.

:class:`Tiles` says what the mask makes of every pair -- EMPTY (skipped), FULL (no elementwise
mask) or PARTIAL (masked) -- from a mask function's block map (:mod:`attnlab.kernels.masks`) or a
mask tensor. :class:`Keys` holds what every query tile of one call walks over: the keys and values,
the tile map, dropout and the score modifier; :meth:`Keys.walk` yields each computed key tile's
scores, modified and masked, in base-2 units. The forward (:mod:`attnlab.kernels.flash`) and the
backward (:mod:`attnlab.kernels.flash_backward`) both walk them; the tags [P1] .. [P12] are the
performance notes in :mod:`attnlab.kernels.flash`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import dropout, online
from .dropout import Dropout
from .masks import EMPTY, FULL, PARTIAL, Mask, tile_slices
from .mods import Closed, Mod, indices
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
        self.band = None  # a flash_band.Plan, when the forward may run as bands instead of tiles
        self.reach = None  # (largest kv_idx - q_idx any row sees, least over rows of each one's largest), if known
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


def mask_slice(m: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
    """Rows and columns of a 4-D mask whose row / column dims may broadcast (size 1)."""
    return m[..., rows if m.shape[-2] > 1 else slice(None), cols if m.shape[-1] > 1 else slice(None)]


def buffer_view(buf: torch.Tensor, shape: tuple) -> torch.Tensor:
    """[P3] The first elements of a flat, reused buffer, as a contiguous tensor of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return buf[:n].view(shape)


def rounded(hbuf: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """[P11] x (float32 weights P or dS) rounded to the half dtype of the reused buffer ``hbuf``, in x's shape:
    FlashAttention's rounding just before a half-precision matmul."""
    return buffer_view(hbuf, tuple(x.shape)).copy_(x)


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


def fused(mod: Mod | None, H: int) -> Closed | None:
    """[P12] The closed form the flash form fuses for ``mod`` (a built-in) on H query heads, else None. A
    per-head one must hold every head, as its function checks."""
    c = getattr(mod, "closed", None)
    if c is None:
        return None
    held = c.param
    if held is not None and held.shape[0] < H:
        name = "alibi" if c.slopes is not None else "relative_bias"
        raise ValueError(f"score modifier {name} holds {held.shape[0]} heads but the attention has at least {H}")
    return c


def modify(mod: Mod, s: torch.Tensor, G: int, rows: slice, cols: slice) -> torch.Tensor:
    """Apply a score modifier to a tile's natural-unit scores (N, Hkv, G*r, c), seen as (N, H, r, c), H = Hkv*G."""
    N, Hkv, _, c = s.shape
    s4 = s.view(N, Hkv * G, -1, c)  # query head h = hk * G + g: the order of the caller's heads
    return mod.apply(s4, *indices(N, Hkv * G, rows.start, rows.stop, cols.start, cols.stop, s.device)).view(s.shape)


@dataclass(frozen=True)
class Keys:
    """What every query tile of one call walks over: keys, values, the tile map, dropout and the modifier."""

    k: torch.Tensor  # (N, Hkv, S, E)
    kT3: torch.Tensor  # (N*Hkv, E, S)
    v: torch.Tensor  # (N, Hkv, S, Ev)
    tiles: Tiles
    drop: Dropout
    mod: Mod | None
    G: int  # query heads per key head
    alpha: float  # [P1] [P8] scale * log2(e): what each dot product is multiplied by
    half: torch.dtype | None = None  # [P11] the dtype of the weight matmuls when it is a half one, else None
    kh: torch.Tensor | None = None  # [P11] k and v in that dtype (exact: they are half values upcast)
    vh: torch.Tensor | None = None
    closed: Closed | None = None  # [P12] a built-in modifier, fused into the tile instead of called
    spare: torch.Tensor | None = None  # [P12] [P3] a second tile buffer, for the soft-cap's tanh
    clamp: bool = True  # [P12] the soft-cap's product may pass what expm1 takes: clamp it first

    @classmethod
    def of(cls, k, v, tiles, drop, mod, G, scale, half: torch.dtype | None = None, spare: bool = True,
           q: torch.Tensor | None = None) -> Keys:
        """``q``: the queries, whose longest with the longest key bounds every product (the soft-cap then skips
        its clamp where no product can reach expm1's limit); None: not known."""
        kT3 = k.reshape(k.shape[0] * k.shape[1], *k.shape[2:]).transpose(1, 2)  # (N*Hkv, E, S)
        kh, vh = (k.to(half), v.to(half)) if half is not None else (None, None)
        closed = fused(mod, k.shape[1] * G)
        capped = closed is not None and closed.cap is not None
        alpha = online.product_alpha(scale, closed.cap if capped else None)  # [P1] [P12]
        clamp = capped and (q is None or not online.expm1_fits(online.qk_bound(q, k) * abs(alpha)))
        spare = k.new_empty(k.shape[0] * k.shape[1] * G * min(tiles.block_q, tiles.L) * min(tiles.block_k, tiles.S)) \
            if capped and spare else None  # (the backward's tanh has its slope buffer)
        return cls(k, kT3, v, tiles, drop, mod, G, alpha, half, kh, vh, closed, spare, clamp)

    def product(self, qi: torch.Tensor, buf: torch.Tensor, cols: slice) -> torch.Tensor:
        """[P1] [P3] alpha * qi @ k^T for key tile ``cols``, (N, Hkv, G*r, c), written into ``buf``."""
        N, Hkv, R, E = qi.shape
        c = cols.stop - cols.start
        s = buffer_view(buf, (N * Hkv, R, c))
        if R == 1:  # one query row (decoding): (1, c) is (c, 1) in memory, and k q^T reads k in its own order
            torch.baddbmm(s.view(N * Hkv, c, 1), self.k.view(N * Hkv, -1, E)[:, cols], qi.reshape(N * Hkv, 1, E).mT,
                          beta=0, alpha=self.alpha, out=s.view(N * Hkv, c, 1))
        else:
            torch.baddbmm(s, qi.reshape(N * Hkv, R, E), self.kT3[:, :, cols], beta=0, alpha=self.alpha, out=s)
        return s.view(N, Hkv, R, -1)

    def scores(self, qi: torch.Tensor, buf: torch.Tensor, qt, rows, kt, cols, kind, finite=False,
               slope: torch.Tensor | None = None) -> torch.Tensor:
        """-- 1. scores -- of query tile qi (N, Hkv, G*r, E) against key tile ``cols``: modified, then masked.
        ``finite``: the scores are known finite (the bounded path), so a bool mask may be added as 0 / -inf.
        ``slope``: a buffer for the soft-cap's derivative 1 - tanh^2 in the tile's shape (the backward's)."""
        s = self.product(qi, buf, cols)
        if self.closed is not None:  # [P12] a built-in modifier, fused
            self.fused_mod(s, rows, cols, slope)
        elif self.mod is not None:  # [P8] the modifier sees natural units
            raw = s.mul_(LN2)
            version = raw._version
            s = modify(self.mod, raw, self.G, rows, cols)
            if raw._version != version:  # it changed its input in place (s.mul_): backward gives it a copy
                self.tiles.mod_in_place = True
            s = s.mul_(LOG2E)
        if kind == PARTIAL:
            tile = self.tiles.tile(qt, kt, rows, cols)
            if finite and tile.dtype == torch.bool:  # [P9] one add of a cached 0 / -inf tile
                tile = self.tiles.additive(qt, kt, tile, s.dtype)
            mask_scores(s, tile, self.G)
        return s

    def fused_mod(self, s: torch.Tensor, rows: slice, cols: slice, slope: torch.Tensor | None = None) -> None:
        """[P12] A built-in modifier on a tile's product s (N, Hkv, G*r, c), in place, to base-2 modified scores.
        Soft-capping: the product is already 2 q.k scale / cap (:meth:`of`'s alpha), so one tanh that multiplies by
        cap * log2(e) on the way (:func:`online.tanh_`); ``slope`` gets 1 - tanh^2. ALiBi and T5's bias: one add
        of the tile's bias in base-2 units (ALiBi's as slope x distance, in the same pass)."""
        c = self.closed
        if c.cap is not None:  # (the slope buffer holds the tanh's denominator first, in the backward)
            times = c.cap * LOG2E
            t = online.tanh_(s, buffer_view(self.spare, tuple(s.shape)) if slope is None else slope, times,
                             doubled=True, clamp=self.clamp)  # times * tanh
            if slope is not None:  # 1 - tanh^2 = 1 - (t / times)^2
                torch.addcmul(torch.ones((), dtype=s.dtype), t, t, value=-1.0 / times ** 2, out=slope)
            return
        N, Hkv, _, n = s.shape
        H = Hkv * self.G
        a, b = c.bias(H, rows, cols, s.dtype, s.device, times=LOG2E)
        s4 = s.view(N, H, -1, n)  # query head h = hk * G + g
        if b is None:
            s4.add_(a)
        else:
            s4.addcmul_(a, b)

    def walk(self, qi: torch.Tensor, buf: torch.Tensor, qt: int, rows: slice, finite: bool = False):
        """(cols, kind, s, s3) of each computed key tile: its scores s (N, Hkv, G*r, c) and s3, the same
        memory as (N*Hkv, G*r, c)."""
        NH, R = qi.shape[0] * qi.shape[1], qi.shape[2]
        for kt, cols, kind in self.tiles.key_tiles(qt, rows):
            s = self.scores(qi, buf, qt, rows, kt, cols, kind, finite)
            yield cols, kind, s, s.view(NH, R, -1)

