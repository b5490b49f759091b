"""How a mask reaches the triton form's kernels: a rule they evaluate, a block map's tables, or a tensor.

The flash form asks its block map about every tile. A GPU kernel wants less to read:

* causal, causal_lower_right, sliding_window, prefix_lm and document masks (and their ``&``) have a
  closed form, a :class:`attnlab.kernels.masks.Rule` that each mask declares beside its function: a
  few integers (and the document ids) from which the kernel computes which key tiles a query tile
  can see, never visiting the others, and which of those are FULL (no elementwise mask); with
  document ids, the range of keys each tile of rows sees comes from the function (:meth:`Mask.spans`);
* any other mask function compiles to its block map, handed over as a per-row list of non-EMPTY
  tiles and the stored masks of the PARTIAL ones;
* a mask tensor is read elementwise, in every tile.

:class:`Plan` turns one call's mask into the kernels' arguments, for the tile sizes of each kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .masks import EMPTY, PARTIAL, Mask, Rule


def rule_of(mask: Mask, L: int, S: int) -> Rule | None:
    """The closed form the kernels evaluate for a mask function (its own, :meth:`Mask.rule`), or None when
    it must go through its block map."""
    return mask.rule(L, S)


def _tile_lists(mask: Mask, N, H, L, S, bq, bk, transpose: bool, device):
    """A mask function's block map as kernel tables: per row tile the non-EMPTY tiles of the other axis
    (LIST), the index of each one's stored mask in PACK (PIDX, -1 for FULL), and their number (COUNT)."""
    bm = mask.block_map(N, H, L, S, bq, bk, device)
    kinds = bm.kind.long()
    keys = sorted(k for k in bm.partial)
    nb = max([bm.partial[k].shape[0] for k in keys] or [1])
    hb = max([bm.partial[k].shape[1] for k in keys] or [1])
    pack = torch.zeros(max(1, len(keys)), nb, hb, bq, bk, dtype=torch.uint8)
    where = torch.full(kinds.shape, -1, dtype=torch.int32)
    for n, (qt, kt) in enumerate(keys):
        t = bm.partial[(qt, kt)]
        pack[n, :, :, : t.shape[2], : t.shape[3]] = t.expand(nb, hb, -1, -1).cpu()
        where[qt, kt] = n
    if transpose:
        kinds, where = kinds.T, where.T
    order = torch.argsort((kinds == EMPTY).to(torch.int8), dim=1, stable=True)  # non-EMPTY first, in order
    count = (kinds != EMPTY).sum(1).to(torch.int32)
    width = max(1, int(count.max()))
    lists = order[:, :width].to(torch.int32).contiguous()
    pidx = where.gather(1, order)[:, :width].contiguous()
    pidx = torch.where(kinds.gather(1, order)[:, :width] == PARTIAL, pidx, -1)
    strides = (nb * hb * bq * bk, hb * bq * bk if nb > 1 else 0, bq * bk if hb > 1 else 0)
    return [x.to(device) for x in (lists, pidx, count, pack)], width, strides


@dataclass(frozen=True)
class Plan:
    """How the kernels see one call's mask (built once per call, used by all launches)."""

    N: int
    H: int
    G: int
    L: int
    S: int
    rule: Rule | None
    mask_fn: Mask | None  # the mask function; without a rule the kernels read its block map
    dense: torch.Tensor | None  # a mask tensor expanded to (N, H, L, S): uint8 (bool) or float

    def args(self, bq: int, bk: int, transpose: bool, dummy: torch.Tensor):
        """The kernels' mask arguments for tiles of bq queries x bk keys (row tiles are keys if transpose),
        in their order (``off`` .. ``p_sh``), and the constexpr flags that say which of them are used.
        ``dummy`` stands in for a table the mask does not need."""
        r = self.rule or Rule()
        doc, doc_sb, span, span_sb = dummy, 0, dummy, 0
        if r.doc is not None:  # (Nd, S) ids and, per row tile, the span of positions sharing a document
            doc = r.doc.to(device=dummy.device, dtype=torch.int32).contiguous()
            span = self.mask_fn.spans(self.N, self.H, self.L, self.S, bk if transpose else bq, transpose,
                                      device=dummy.device).to(torch.int32).contiguous()
            doc_sb = doc.shape[1] if doc.shape[0] > 1 else 0
            span_sb = span.shape[1] * 2 if span.shape[0] > 1 else 0
        dense = self.dense if self.dense is not None else dummy
        dense_strides = self.dense.stride() if self.dense is not None else (0, 0, 0, 0)
        (lists, pidx, count, pack), width, pack_strides = [dummy] * 4, 1, (0, 0, 0)
        tiles = self.rule is None and self.mask_fn is not None
        if tiles:
            (lists, pidx, count, pack), width, pack_strides = _tile_lists(
                self.mask_fn, self.N, self.H, self.L, self.S, bq, bk, transpose, dummy.device)
        args = (r.off or 0, r.window or 0, r.prefix or 0, doc, doc_sb, dense, *dense_strides, span, span_sb,
                lists, pidx, count, width, pack, *pack_strides)
        flags = dict(CAUSAL=r.off is not None, WINDOW=r.window is not None, PREFIX=r.prefix is not None,
                     DOCS=r.doc is not None, TILES=tiles,
                     DENSE=0 if self.dense is None else (1 if self.dense.dtype == torch.uint8 else 2))
        return args, flags
