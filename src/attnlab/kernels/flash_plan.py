"""The flash form's plan: every choice of one call, made once before any tile is computed, and printable.

The loop of :mod:`attnlab.kernels.flash` decides nothing. Its fast paths are strategies that the call's arguments
choose here, in :func:`make`, into a :class:`Plan`:

* the **path** -- ``tiles``: the tile walk, the mask's empty tiles skipped; ``bands``: with a sparse mask function,
  each query tile against one band of keys (:mod:`attnlab.kernels.flash_band`), where that does less work;
  ``split heads``: ALiBi under the causal mask, each run of key heads over the keys whose weights are not exactly
  0 ([P13], :mod:`attnlab.kernels.flash_reach`); ``nothing``: an empty dim;
* the **tile sizes** and where they came from: given, tuned for this processor (:mod:`attnlab.kernels.tuned`),
  the defaults, or key tiles widened for decoding ([P5]);
* the **shift** ([P2]): :class:`Bounded`, which lets a query tile skip the running max where its scores provably
  stay within +-SAFE_LOGIT, or the reason every tile keeps it;
* the **modifier**, fused into the tile or called ([P12]), and the weights' matmul dtype ([P11]).

``print(attnlab.kernels.flash.plan(q, k, v, is_causal=True))`` shows it without computing anything::

    flash plan: q (1, 8, 4096, 64) float32, k and v (1, 8, 4096, 64), causal
      path      tiles of 256 x 256 (the defaults): 136 of 256 computed per head, 16 of them masked
      shift     0 on each query tile whose |q| |k| scale per head is at most 40, else the running max [P2]
      modifier  none
      weights   multiplied in float32 [P11]
      dropout   none

What depends on the values, not only on the arguments, is still decided in the forward, by the strategy the plan
chose: the bound of each query tile, and whether a float16 product could overflow ([P11]).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import flash_band, flash_reach, online, tuned
from ._check import Args
from .argcheck import fail, positive_int
from .dtypes import matmul_dtype
from .flash_tiles import Tiles
from .masks import causal
from .mods import Fused, Mod
from .tuned import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q

TILE_SCORES = DEFAULT_BLOCK_Q * DEFAULT_BLOCK_K  # [P5] fewer query rows than a tile: wider key tiles, as many scores
FEW_ROWS = 4  # [P2] query rows per key head below which the running max is cheaper than the keys' norms (decoding)
TILES, BANDS, SPLIT, NOTHING = "tiles", "bands", "split heads", "nothing"
_CAUSAL = causal()  # one instance, so its compiled block maps are cached across calls


@dataclass(frozen=True)
class Bounded:
    """[P2] The shift stays 0 where no score can leave [-SAFE_LOGIT, SAFE_LOGIT]: exp2 then neither overflows nor
    underflows, and the running max, the rescale and the -inf guard are skipped. |q.k| <= |q| |k|; a fused
    modifier adds its own bound (:meth:`attnlab.kernels.mods.Fused.bounded`), from the mask's ``reach``."""

    scale: float
    mod: Fused | None = None
    reach: tuple | None = None  # (largest kv_idx - q_idx any row sees, least over rows of each one's largest)

    def holds(self, qi: torch.Tensor, k_norms: torch.Tensor) -> bool:
        """For one query tile qi (N, Hkv, R, E), its heads' longest keys ``k_norms`` (N, Hkv, 1)."""
        return online.bounded(online.head_bound(qi, k_norms), self.scale, online.SAFE_LOGIT, self.mod, self.reach)

    def allows(self, qk: float) -> bool:
        """For a whole call whose every |q.k| is at most ``qk`` (the bands: one decision)."""
        return online.bounded(qk, self.scale, online.SAFE_LOGIT, self.mod, self.reach)


@dataclass(frozen=True)
class Plan:
    """What the flash form does with one call's arguments (:func:`make`); ``str()`` says it in words."""

    args: Args = field(repr=False)  # the checked arguments
    path: str  # TILES, BANDS, SPLIT or NOTHING
    block_q: int  # [P5] the tile sizes asked for (a tile is cut to L and S)
    block_k: int
    sizes: str  # where they came from
    mod: Mod | None = None
    half: torch.dtype | None = None  # [P11] the weights' matmul dtype when it is a half one; None: the work dtype
    tiles: Tiles | None = field(default=None, repr=False)  # the forward's walk (TILES) and always the backward's
    bands: flash_band.Bands | None = field(default=None, repr=False)  # BANDS: the key bands
    heads: tuple = ()  # SPLIT [P13]: (first key head, end, window or None for causal) per run
    bounded: Bounded | None = None  # [P2] None: every tile keeps the running max, for the reason ``why_max``
    why_max: str = ""

    @property
    def fused(self) -> Fused | None:
        return self.mod if isinstance(self.mod, Fused) else None

    def __str__(self) -> str:
        args = self.args
        values = "" if args.Ev == args.E else f" / {tuple(args.v.shape)}"
        lines = [f"flash plan: q {tuple(args.q.shape)} {str(args.q.dtype).removeprefix('torch.')}, k and v "
                 f"{tuple(args.k.shape)}{values}, {_mask_words(args)}",
                 f"  path      {self._path_words()}"]
        if self.path in (TILES, BANDS):
            lines.append(f"  shift     {self._shift_words()}")
        if self.mod is not None:
            how = "fused into the tile [P12]" if self.fused is not None else "called as a function on every tile"
            lines.append(f"  modifier  {self.mod.name}, {how}")
        else:
            lines.append("  modifier  none")
        if args.sinks is not None:
            lines.append(f"  sinks     {args.sinks.shape[0]}, one per query head: each row's sum gains exp(sink) after "
                         "its last key tile; dsink from each row's saved numbers")
        lines.append(f"  weights   multiplied in {str(self.half or args.work).removeprefix('torch.')} [P11]")
        lines.append(f"  dropout   {args.dropout_p:g}" if args.dropout_p > 0 else "  dropout   none")
        return "\n".join(lines)

    def _shift_words(self) -> str:
        if self.bounded is None:
            return f"the running max: {self.why_max}"
        rule = (f"0 on each query tile whose |q| |k| scale per head is at most {online.SAFE_LOGIT:g}"
                if self.path == TILES else f"0 for the whole call when |q| |k| scale is at most {online.SAFE_LOGIT:g}")
        if self.half == torch.float16:  # (the forward rules it out once it knows the products fit float16)
            return (f"the running max for float16 weights, whose exp(s) could pass 65504 [P11]; where a product "
                    f"could pass it the weights stay float32, and then {rule} [P2]")
        return f"{rule}, else the running max [P2]"

    def _path_words(self) -> str:
        if self.path == NOTHING:
            return "nothing to compute: an empty dim"
        if self.path == SPLIT:
            runs = ", ".join((f"key head {h0} " if h1 == h0 + 1 else f"key heads {h0}-{h1 - 1} ")
                             + ("causal" if w is None else f"over {w} keys") for h0, h1, w in self.heads)
            return f"ALiBi's heads split [P13]: {runs}; each run is a call of its own with its own plan"
        t = self.tiles
        size = f"{t.block_q} x {t.block_k} ({self.sizes})"
        if self.path == BANDS:
            b = self.bands
            return (f"key bands of {b.block_q} query rows in {len(b.batches)} batches: {b.scores} scores per head, "
                    f"{b.scores / t.scores():.2f} of the tiles' (tiles of {size}: the backward's)")
        counts = t.counts()
        if counts is None:
            return f"tiles of {size}" + (", each masked" if t.dense is not None else ", none masked")
        computed = counts["full"] + counts["partial"]
        return (f"tiles of {size}: {computed} of {sum(counts.values())} computed per head, {counts['partial']} of "
                "them masked")


def make(args: Args, mod: Mod | None, block_q: int | None = None, block_k: int | None = None, bands: bool = True,
         half_matmuls: bool | None = None, split_heads: bool = True) -> Plan:
    """The plan for checked arguments ``args`` and the flash form's own options (:func:`attnlab.kernels.flash.attention`
    documents them)."""
    for name, b in (("block_q", block_q), ("block_k", block_k)):
        if b is not None:
            positive_int(name, b, "a positive integer tile size")
    sizes = tuned.current()  # [P5] what this processor measured, where it measured anything
    block_q, block_k, where = _tile_sizes(args.L, block_q, block_k, sizes)
    if half_matmuls is not None and not isinstance(half_matmuls, bool):
        raise fail("half_matmuls", half_matmuls, "True, False or None")
    base = {"args": args, "block_q": block_q, "block_k": block_k, "sizes": where, "mod": mod}
    if args.trivial:  # an empty dim: nothing to attend to
        return Plan(path=NOTHING, **base)
    mm = matmul_dtype(args.q.dtype, args.q.device, half_matmuls)  # [P11]
    half = mm if mm != args.work else None
    if isinstance(mod, Fused):
        mod.check_heads(args.H)
    heads = flash_reach.alibi_heads(args, mod, args.work, half) if bands and split_heads else None  # [P13]
    if heads is not None:
        return Plan(path=SPLIT, half=half, heads=tuple(heads), **base)
    mask_fn = _CAUSAL if args.is_causal else args.mask
    bias = args.attn_mask.to(args.work) if args.attn_mask is not None and args.attn_mask.dtype != torch.bool else None
    dense = args.attn_mask if bias is None else bias
    skip = dense is None or bool(torch.isfinite(args.v).all())  # hidden NaN values must still reach the output
    tiles = Tiles(args.N, args.H, args.L, args.S, min(block_q, args.L), min(block_k, args.S), mask_fn, dense,
                  args.q.device, skip)
    band = _bands(args, mask_fn, dense, mod, tiles, sizes) if bands else None
    if band is not None:  # (float16 weights keep the running max: exp(40) would pass 65504 [P11])
        rule, why = (Bounded(args.scale, mod, band.reach), "") if half != torch.float16 else \
            (None, "float16 weights: P = exp(s) could pass 65504 [P11]")
    else:
        reach = flash_reach.reach(mask_fn, args.L, args.S) if dense is None else None  # ALiBi's bounds [P12]
        rule, why = tile_rule(args.groups, args.L, args.scale, bias is not None, mod, reach)
    return Plan(path=TILES if band is None else BANDS, half=half, tiles=tiles, bands=band, bounded=rule,
                why_max=why, **base)


def tile_rule(G: int, L: int, scale: float, bias: bool, mod: Mod | None, reach: tuple | None):
    """(the :class:`Bounded` rule of a tile walk over L query rows of G heads per key head, or None; why not).
    (float16 weights are ruled out where the forward knows its matmul dtype: flash.forward_tiles.)"""
    if G * L < FEW_ROWS:
        return None, (f"{G * L} query row{'s' if G * L != 1 else ''} per key head (decoding): the keys' norms would "
                      "cost a pass as long as the attention")
    if bias:
        return None, "a float mask can move a score anywhere"
    if mod is not None and not isinstance(mod, Fused):
        return None, f"the modifier {mod.name} is called as a function: it can move a score anywhere"
    return Bounded(scale, mod, reach), ""


def _tile_sizes(L: int, block_q: int | None, block_k: int | None, sizes: tuned.Sizes) -> tuple[int, int, str]:
    """[P5] (block_q, block_k, where they came from): given by hand, else tuned, else the defaults; a query block
    longer than L (decoding) takes key tiles of TILE_SCORES // L keys instead of the default's."""
    tq, tk = sizes.tiles(L)
    words = ["given" if block_q else "tuned" if tq else "default"]
    block_q = block_q or tq or DEFAULT_BLOCK_Q
    if block_k is None and tk is None and block_q > L:  # decoding: one query, S keys, in a few wide tiles
        block_k = max(DEFAULT_BLOCK_K, TILE_SCORES // max(L, 1) // 64 * 64)
        words.append("widened (fewer query rows than a tile)")
    else:
        words.append("given" if block_k else "tuned" if tk else "default")
    block_k = block_k or tk or DEFAULT_BLOCK_K
    where = ({"given": "given", "tuned": "tuned", "default": "the defaults"}[words[0]] if words[0] == words[1] else
             f"block_q {words[0]}, block_k {words[1]}")
    return block_q, block_k, where + (f": {sizes.source}" if "tuned" in words else "")


def _bands(args: Args, mask_fn, dense, mod, tiles: Tiles, sizes: tuned.Sizes) -> flash_band.Bands | None:
    """The key bands where they do less work than the tiles: a sparse mask function, no mask tensor, no dropout, and
    no modifier but a fused one (it rides along [P12]; a function walks the tiles)."""
    if mask_fn is None or dense is not None or args.dropout_p > 0 or (mod is not None and not isinstance(mod, Fused)):
        return None
    band = flash_band.bands(mask_fn, args.N, args.H, args.L, args.S, sizes.band_rows or flash_band.BAND_BLOCK_Q,
                            args.q.device, sizes.band_batch)
    if band is not None and band.scores <= flash_band.SHARE_OF_TILES * tiles.scores():
        return band  # (documents aligned to the tiles: the tile walk has no waste to save)
    return None


def _mask_words(args: Args) -> str:
    if args.is_causal:
        return "causal"
    if args.mask is not None:
        return f"mask {args.mask.name}"
    if args.attn_mask is not None:
        kind = "bool" if args.attn_mask.dtype == torch.bool else "float"
        return f"a {kind} mask {tuple(args.attn_mask.shape)}"
    return "no mask"
