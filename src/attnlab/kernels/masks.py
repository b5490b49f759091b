"""Masks as functions, in the style of PyTorch's FlexAttention.

A mask answers one question: may query ``i`` (of batch ``b``, head ``h``) look at key ``j``?
Written as a function of the indices instead of an L x S tensor, a mask costs no memory and can
be asked about a whole *tile* at once. That is what lets the flash form skip work: for a given
L, S and tile size the mask compiles once to a **block map** in which every (query tile, key tile)
pair is

* ``EMPTY``   -- no query in the tile sees any key in it: skipped, no arithmetic at all;
* ``FULL``    -- every query sees every key: computed with no elementwise mask;
* ``PARTIAL`` -- some do, some don't: computed, then masked elementwise.

Pieces: :func:`causal`, :func:`causal_lower_right`, :func:`sliding_window`, :func:`document`,
:func:`prefix_lm`, combined with :func:`and_masks` / :func:`or_masks` (or ``&`` / ``|``), and
:meth:`Mask.from_mod` for your own ``mask_mod(b, h, q_idx, kv_idx)``. :func:`from_spec` makes one
from the name the command line uses, e.g. ``"sliding_window:512"``.

Every form accepts a mask as ``attn_mask=``; forms without tiles receive the equivalent dense
boolean tensor from :meth:`Mask.dense`.

The function is the one definition. What a kernel needs to know about tiles is derived from it,
here, once per sizes and cached: the block map (:meth:`Mask.block_map`) and, per tile of rows, the
range of columns its rows see (:meth:`Mask.spans`: the band path's key ranges, the triton form's
document ranges). A kernel that evaluates a mask itself instead (the triton form's predicates) reads
the mask's closed form, a :class:`Rule` that the mask's own constructor declares beside its
function (:meth:`Mask.rule`). :meth:`Rule.visible` evaluates a rule in PyTorch: tests hold each rule to its
mask's function with it, and the triton predicates to both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from attnlab.shapes import broadcast_shapes

from .argcheck import nonneg_int, positive_int, takes
from .mask_mod import PerIndex

EMPTY, PARTIAL, FULL = 0, 1, 2
NO_LIMIT = 2**62  # past every position a tensor can index: a longer window or prefix is the same mask
_CACHE_SIZE = 32  # compiled block maps kept per mask (oldest dropped first)

# fn(b, h, i, j, L, S) -> bool tensor; b, h, i, j are broadcastable index tensors.
MaskFn = Callable[..., torch.Tensor]


def tile_slices(length: int, size: int) -> Iterator[tuple[int, slice]]:
    """(index, positions) of each tile of ``size`` along ``range(length)``; the last tile may be shorter.

    Every tile loop walks these: the block map below, the flash form's forward and backward, and
    ring attention's accounting. ``for qt, rows in tile_slices(L, block_q)`` reads as "query tile qt
    holds rows ``rows.start`` to ``rows.stop``".
    """
    for i, start in enumerate(range(0, length, size)):
        yield i, slice(start, min(length, start + size))


@dataclass(frozen=True)
class BlockMap:
    """Per (query tile, key tile): EMPTY / PARTIAL / FULL, plus the elementwise masks of partial tiles.

    ``kind`` has shape (nQ, nK); a tile is EMPTY or FULL only if it is so for every batch element
    and head. ``partial[(qt, kt)]`` is the (Nb, Hb, Bq, Bk) bool mask of a partial tile, where Nb, Hb
    are 1 when the mask does not depend on the batch / head index. Memory: only partial tiles are
    stored -- for causal and sliding-window masks that is O(L), not O(L x S).
    """

    kind: torch.Tensor  # (nQ, nK) int8
    partial: dict
    block_q: int
    block_k: int

    def counts(self) -> dict:
        """How many tiles of each kind (for reports: the work a mask saves)."""
        return {name: int((self.kind == code).sum()) for name, code in
                (("empty", EMPTY), ("partial", PARTIAL), ("full", FULL))}


@dataclass(frozen=True)
class Rule:
    """A mask in closed form, for a kernel that evaluates it itself instead of calling its function:

        visible(i, j) = (((j <= i + off) & (j > i + off - window)) | (j < prefix)) & (doc[i] == doc[j])

    with each part left out where it is None (``off`` None: no causal part, and then no window or
    prefix either). The constructors below declare it beside the function it must agree with.
    """

    off: int | None = None
    window: int | None = None
    prefix: int | None = None
    doc: torch.Tensor | None = None  # (Nd, S) document ids, Nd in {1, N}

    def both(self, other: Rule | None) -> Rule | None:
        """The rule of ``self & other``; None where no rule says it: two documents, a prefix (an OR)
        beside another causal part, or two alignments of the causal part."""
        if other is None or (self.doc is not None and other.doc is not None):
            return None
        doc = self.doc if self.doc is not None else other.doc
        a, b = (self, other) if self.off is not None else (other, self)  # a holds the causal part, if any
        if b.off is None:
            return Rule(a.off, a.window, a.prefix, doc)
        if a.prefix is not None or b.prefix is not None or a.off != b.off:
            return None
        windows = [w for w in (a.window, b.window) if w is not None]
        return Rule(a.off, min(windows) if windows else None, None, doc)

    def visible(self, b: torch.Tensor, h: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        """The formula above at broadcast index tensors (as :func:`index_grid` makes them): a bool tensor of
        their broadcast shape. The one evaluation of a rule in PyTorch, the reference for the kernels that
        evaluate it themselves."""
        seen = torch.ones(broadcast_shapes(b.shape, h.shape, i.shape, j.shape), dtype=torch.bool,
                          device=i.device)
        if self.off is not None:
            causal = j <= i + self.off
            if self.window is not None:
                causal = causal & (j > i + self.off - self.window)
            if self.prefix is not None:
                causal = causal | (j < self.prefix)
            seen = seen & causal
        if self.doc is not None:
            d = self.doc.to(i.device)
            bb = b if d.shape[0] > 1 else torch.zeros_like(b)
            seen = seen & (d[bb, i] == d[bb, j])
        return seen


def index_grid(N: int, H: int, q0: int, q1: int, k0: int, k1: int, device="cpu") -> tuple[torch.Tensor, ...]:
    """The broadcast index tensors a mask is asked about: b (N,1,1,1), h (1,H,1,1), i (1,1,r,1), j (1,1,1,c)
    for rows q0:q1 and columns k0:k1."""
    return (torch.arange(N, device=device).view(N, 1, 1, 1), torch.arange(H, device=device).view(1, H, 1, 1),
            torch.arange(q0, q1, device=device).view(1, 1, -1, 1),
            torch.arange(k0, k1, device=device).view(1, 1, 1, -1))


class Mask:
    """A mask function. Call :meth:`dense` for the tensor, :meth:`block_map` for the tile map."""

    def __init__(self, fn: MaskFn, name: str, check_sizes: Callable[..., None] | None = None,
                 rule: Callable[[int, int], Rule | None] | None = None):
        self._fn = fn
        self.name = name
        self._check_sizes = check_sizes
        self._rule = rule  # (L, S) -> the closed form of fn; None for a mask_mod of your own
        self._cache: dict = {}

    def __repr__(self) -> str:
        return f"Mask({self.name})"

    @classmethod
    def from_mod(cls, mask_mod: Callable, name: str | None = None) -> Mask:
        """Wrap a FlexAttention-style ``mask_mod(b, h, q_idx, kv_idx) -> bool``.

        Written for one position at a time, as for FlexAttention (indexing tensors with ``q_idx``), or
        for broadcast index tensors: :class:`attnlab.kernels.mask_mod.PerIndex` tells them apart once.
        """
        if not callable(mask_mod):
            raise TypeError(f"mask_mod must be a function mask_mod(b, h, q_idx, kv_idx) -> bool tensor, got "
                            f"{type(mask_mod).__name__} {mask_mod!r}")
        name = name or getattr(mask_mod, "__name__", "custom")
        takes(mask_mod, 4, f"mask_mod {name}", "(b, h, q_idx, kv_idx) -> bool tensor")
        return cls(PerIndex(mask_mod), name)

    def check_sizes(self, N: int, H: int, L: int, S: int) -> None:
        """Raise ValueError if the mask cannot describe an (N, H, L, S) problem."""
        if self._check_sizes is not None:
            self._check_sizes(N=N, H=H, L=L, S=S)

    def __call__(self, b, h, i, j, L: int, S: int) -> torch.Tensor:
        return self._fn(b, h, i, j, L, S)

    def rule(self, L: int, S: int) -> Rule | None:
        """The mask in closed form for L queries and S keys, or None when it has none (then a kernel reads
        its block map)."""
        return None if self._rule is None else self._rule(L, S)

    def __and__(self, other: Mask) -> Mask:
        return and_masks(self, other)

    def __or__(self, other: Mask) -> Mask:
        return or_masks(self, other)

    def evaluate(self, N, H, L, S, q0=0, q1=None, k0=0, k1=None, device="cpu") -> torch.Tensor:
        """The mask on rows q0:q1 and columns k0:k1, shape (Nb, Hb, q1-q0, k1-k0), Nb in {1, N}, Hb in {1, H}."""
        q1 = L if q1 is None else q1
        k1 = S if k1 is None else k1
        b, h, i, j = index_grid(N, H, q0, q1, k0, k1, device)
        raw = self._fn(b, h, i, j, L, S)
        if not isinstance(raw, torch.Tensor):  # a plain True would hide nothing, by accident, without a word
            raise TypeError(f"mask {self.name} returned a Python {type(raw).__name__} ({raw!r}), not a bool tensor: "
                            "build it from the index tensors, e.g. q_idx >= kv_idx (for no mask, pass none)")
        out = raw.to(device)
        if out.dtype != torch.bool:
            raise TypeError(f"mask {self.name} returned dtype {out.dtype}; a mask function must return bools")
        out = out.reshape((1,) * (4 - out.dim()) + tuple(out.shape))
        return out.expand(out.shape[0], out.shape[1], q1 - q0, k1 - k0)

    def dense(self, N: int, H: int, L: int, S: int, device="cpu") -> torch.Tensor:
        """The equivalent dense bool tensor, broadcastable to (N, H, L, S)."""
        return self.evaluate(N, H, L, S, device=device)

    def block_map(self, N: int, H: int, L: int, S: int, block_q: int, block_k: int, device="cpu") -> BlockMap:
        """Compile (once per sizes) to a :class:`BlockMap`; never materialises L x S."""
        for name, x in (("block_q", block_q), ("block_k", block_k)):
            positive_int(name, x, "a positive integer tile size")
        key = ("block_map", N, H, L, S, block_q, block_k, str(device))
        if key in self._cache:
            return self._cache[key]
        kinds = torch.empty(-(-L // block_q), -(-S // block_k), dtype=torch.int8)  # (nQ, nK)
        partial = {}
        for qt, rows in tile_slices(L, block_q):
            for kt, cols in tile_slices(S, block_k):
                tile = self.evaluate(N, H, L, S, rows.start, rows.stop, cols.start, cols.stop, device)  # (Nb, Hb, r, c)
                if bool(tile.all()):
                    kinds[qt, kt] = FULL
                elif bool(tile.any()):
                    kinds[qt, kt] = PARTIAL
                    partial[(qt, kt)] = tile.contiguous()
                else:
                    kinds[qt, kt] = EMPTY
        return self._keep(key, BlockMap(kind=kinds, partial=partial, block_q=block_q, block_k=block_k))

    def spans(self, N: int, H: int, L: int, S: int, block: int, transpose: bool = False, per_batch: bool = True,
              device="cpu") -> torch.Tensor:
        """Per tile of ``block`` queries (keys if ``transpose``): the range [lo, hi) of keys (queries) that any
        of its rows sees, over every head; (0, 0) where it sees none. Shape (Nb, tiles, 2), int64, Nb = 1
        when the mask does not depend on the batch (or ``per_batch=False``: the union over the batch).
        Compiled once per sizes; never materialises L x S."""
        positive_int("block", block, "a positive integer tile size")
        key = ("spans", N, H, L, S, block, transpose, per_batch, str(device))
        if key in self._cache:
            return self._cache[key]
        n_rows, n_cols = (S, L) if transpose else (L, S)
        idx = torch.arange(n_cols, device=device)
        out = []
        for _, rows in tile_slices(n_rows, block):
            lims = (0, L, rows.start, rows.stop) if transpose else (rows.start, rows.stop, 0, S)
            seen = self.evaluate(N, H, L, S, *lims, device=device).any(dim=1)  # (Nb, r, c): over the heads
            seen = seen.any(dim=2 if transpose else 1)  # (Nb, n_cols): over the tile's rows
            if not per_batch:
                seen = seen.any(dim=0, keepdim=True)
            hi = torch.where(seen, idx + 1, 0).amax(dim=-1)
            lo = torch.where(hi > 0, torch.where(seen, idx, n_cols).amin(dim=-1), 0)
            out.append(torch.stack([lo, hi], dim=-1))
        return self._keep(key, torch.stack(out, dim=1))

    def _keep(self, key, value):
        if len(self._cache) >= _CACHE_SIZE:  # bounded: decoding token by token asks for a new S every step
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = value
        return value


def causal() -> Mask:
    """Key j is visible to query i when j <= i (upper-left aligned, like ``is_causal=True``)."""
    return Mask(lambda b, h, i, j, L, S: j <= i, "causal", rule=lambda L, S: Rule(off=0))


def causal_lower_right() -> Mask:
    """Causal, aligned to the bottom-right corner: j <= i + (S - L).

    This is what decoding with a KV cache needs: the last query is the newest token and sees every
    cached key. PyTorch's ``is_causal=True`` aligns upper-left, so a single query (L=1) would see
    only the first key (pytorch/pytorch#144858).
    """
    return Mask(lambda b, h, i, j, L, S: j <= i + (S - L), "causal_lower_right", rule=lambda L, S: Rule(off=S - L))


def sliding_window(window: int) -> Mask:
    """Key j visible to query i when i - window < j <= i: the last ``window`` tokens, itself included."""
    positive_int("window", window, owner="sliding_window")
    w = min(window, NO_LIMIT)  # a window past any position is no limit (and 2**70 would overflow int64)
    return Mask(lambda b, h, i, j, L, S: (j <= i) & (j > i - w), f"sliding_window({window})",
                rule=lambda L, S: Rule(off=0, window=w))


def prefix_lm(n: int) -> Mask:
    """The first ``n`` keys are visible to every query; the rest causally (j <= i)."""
    nonneg_int("prefix length", n, owner="prefix_lm")
    p = min(n, NO_LIMIT)  # a prefix past any position is every key (and 2**70 would overflow int64)
    return Mask(lambda b, h, i, j, L, S: (j < p) | (j <= i), f"prefix_lm({n})",
                rule=lambda L, S: Rule(off=0, prefix=p))


def document(doc_ids: torch.Tensor) -> Mask:
    """Packed sequences: a token sees only tokens of its own document.

    ``doc_ids`` has shape (S,) -- one document id per position, shared by the batch -- or (N, S)
    for one row of ids per batch element. Queries and keys are the same positions (L == S).
    Combine with :func:`causal` for packed causal training: ``document(ids) & causal()``.
    """
    if not isinstance(doc_ids, torch.Tensor) or doc_ids.dim() not in (1, 2) or doc_ids.is_floating_point():
        raise ValueError("document needs an integer tensor of document ids of shape (S,) or (N, S)")
    ids = doc_ids if doc_ids.dim() == 2 else doc_ids[None]  # (Nd, S)

    def fn(b, h, i, j, L, S):
        d = ids.to(i.device)
        bb = b if d.shape[0] > 1 else torch.zeros_like(b)
        return d[bb, i] == d[bb, j]

    def check_sizes(N, H, L, S):
        if L != S or ids.shape[1] != S:
            raise ValueError(
                f"document mask has ids for {ids.shape[1]} positions but the problem has L={L} queries "
                f"and S={S} keys; it needs L == S == len(doc_ids)"
            )
        if ids.shape[0] not in (1, N):
            raise ValueError(f"document mask has ids for {ids.shape[0]} batch rows but the batch has N={N}")

    return Mask(fn, "document", check_sizes, rule=lambda L, S: Rule(doc=ids))


def _combine(masks, op, word) -> Mask:
    if not masks or not all(isinstance(m, Mask) for m in masks):
        raise TypeError(f"{word}_masks takes one or more attnlab masks")

    def fn(b, h, i, j, L, S):
        out = masks[0](b, h, i, j, L, S)
        for m in masks[1:]:
            out = op(out, m(b, h, i, j, L, S))
        return out

    def check_sizes(**sizes):
        for m in masks:
            m.check_sizes(**sizes)

    def rule(L, S):  # an AND of rules is a rule where they fit together (Rule.both); an OR is not
        rules = [m.rule(L, S) for m in masks]
        if word == "or" or any(r is None for r in rules):
            return None
        out = rules[0]
        for r in rules[1:]:
            out = out.both(r) if out is not None else None
        return out

    return Mask(fn, f" {word} ".join(m.name for m in masks), check_sizes, rule)


def and_masks(*masks: Mask) -> Mask:
    """Visible only where every mask says visible."""
    return _combine(masks, torch.logical_and, "and")


def or_masks(*masks: Mask) -> Mask:
    """Visible where any mask says visible."""
    return _combine(masks, torch.logical_or, "or")


SPECS = ("causal", "causal_lower_right", "sliding_window:W", "prefix_lm:N", "document:K")


def from_spec(spec: str, length: int | None = None) -> Mask:
    """A mask from its name, as the command line and configs write it: one of :data:`SPECS`.

    ``sliding_window:512`` is :func:`sliding_window` (512), ``prefix_lm:N`` is :func:`prefix_lm` (N),
    ``document:K`` packs K equal documents into ``length`` positions (:func:`document`). W and K are
    positive integers, N is 0 or more. Anything else is a ValueError naming the spec and the names.
    """
    if not isinstance(spec, str):
        raise TypeError(f"a mask spec is a string such as 'sliding_window:512', got {type(spec).__name__}")
    name, colon, arg = spec.partition(":")
    number = int(arg) if arg.isascii() and arg.isdigit() else None
    if not colon and name in ("causal", "causal_lower_right"):
        return causal() if name == "causal" else causal_lower_right()
    if number is not None and (number >= 1 or name == "prefix_lm"):
        if name == "sliding_window":
            return sliding_window(number)
        if name == "prefix_lm":
            return prefix_lm(number)
        if name == "document":
            if length is None:
                raise ValueError(f"mask {spec!r} needs the sequence length to split it into {number} documents")
            if number > length:
                raise ValueError(f"mask {spec!r} asks for {number} documents in {length} positions; K can be at "
                                 f"most the length ({length}), one position per document")
            return document(torch.arange(length) * number // length)
    raise ValueError(f"unknown mask {spec!r}; choose from {', '.join(SPECS)} "
                     "(W and K positive integers, N an integer >= 0)")
