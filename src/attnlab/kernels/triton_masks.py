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

:class:`Plan` turns one call's mask into the kernels' arguments, for the tile sizes of each kernel:
one int64 table (a header of :data:`FIELDS`, then the tables it points into: document ids, ranges,
the block map's lists), the mask tensor as it is (strides in the header, no copy), the stored
tiles of a block map, and one constexpr ``MASKS`` whose :data:`BITS` say which parts are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .masks import EMPTY, PARTIAL, Mask, Rule

# The mask table's header, in order: the rule's integers, then where each table starts in the table and
# its stride per batch element, the block map's list width and its stored tiles' strides, the mask
# tensor's strides. The kernels read each field at its index here (triton_kernels).
FIELDS = ("off", "window", "prefix", "doc_sb", "doc_at", "range_sb", "range_at", "list_at", "pidx_at", "count_at",
          "n_list", "pack_st", "pack_sn", "pack_sh", "mask_sb", "mask_sh", "mask_sl", "mask_ss")
# The bits of the MASKS constexpr: which parts of a mask a kernel compiles in.
BITS = {"CAUSAL": 1, "WINDOW": 2, "PREFIX": 4, "DOCS": 8, "TILES": 16, "DENSE_BOOL": 32, "DENSE_FLOAT": 64}


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

    def args(self, bq: int, bk: int, transpose: bool, device) -> tuple[tuple, int]:
        """The kernels' mask arguments for tiles of bq queries x bk keys (row tiles are keys if transpose):
        (MT, MASK, PACK) -- the table, the mask tensor, the stored tiles; MT stands in for what the mask
        does not need -- and MASKS, the constexpr whose bits (:data:`BITS`) say which parts are used."""
        r = self.rule or Rule()
        head = dict.fromkeys(FIELDS, 0)
        head.update(off=r.off or 0, window=r.window or 0, prefix=r.prefix or 0)
        tables: list[torch.Tensor] = []

        def put(name: str, t: torch.Tensor) -> None:  # a table after the header and those before it
            head[name] = len(FIELDS) + sum(x.numel() for x in tables)
            tables.append(t.to(device=device, dtype=torch.int64).reshape(-1))

        if r.doc is not None:  # (Nd, S) ids and, per row tile, the range of the other axis it sees
            span = self.mask_fn.spans(self.N, self.H, self.L, self.S, bk if transpose else bq, transpose,
                                      device=device)
            put("doc_at", r.doc)
            put("range_at", span)
            head.update(doc_sb=r.doc.shape[1] if r.doc.shape[0] > 1 else 0,
                        range_sb=span.shape[1] * 2 if span.shape[0] > 1 else 0)
        pack = None
        tiles = self.rule is None and self.mask_fn is not None
        if tiles:
            (lists, pidx, count, pack), width, pack_strides = _tile_lists(
                self.mask_fn, self.N, self.H, self.L, self.S, bq, bk, transpose, device)
            put("list_at", lists)
            put("pidx_at", pidx)
            put("count_at", count)
            head.update(n_list=width, pack_st=pack_strides[0], pack_sn=pack_strides[1], pack_sh=pack_strides[2])
        if self.dense is not None:
            head.update(zip(("mask_sb", "mask_sh", "mask_sl", "mask_ss"), self.dense.stride(), strict=True))
        mt = torch.cat([torch.tensor([head[f] for f in FIELDS], dtype=torch.int64, device=device), *tables])
        bits = {"CAUSAL": r.off is not None, "WINDOW": r.window is not None, "PREFIX": r.prefix is not None,
                "DOCS": r.doc is not None, "TILES": tiles, "DENSE_BOOL": self.dense is not None and
                self.dense.dtype == torch.uint8, "DENSE_FLOAT": self.dense is not None and
                self.dense.dtype != torch.uint8}
        masks = sum(BITS[name] for name, on in bits.items() if on)
        return (mt, self.dense if self.dense is not None else mt, pack if pack is not None else mt), masks
