"""A paged KV cache as the judge lays it out for the paged-decode API: pages in memory, and a table of them.

Sequence b's key number j lives in page ``block_table[b, j // block_size]`` at row ``j % block_size``. The
judge's keys arrive in the oracle's order, (B, Hkv, S, D); here they are put in pages shuffled at random (fixed by
the case's name), with spare pages no table points to -- the first and the last in memory among them, so that a
page number read one off lands on a page, never off the cache's end. Spare pages and the slots the new keys
will fill hold other numbers than any key: ordinary random values, so that a kernel that reads them gives an
answer the oracle can compute too.

Every slot of memory has a number (page * block_size + row): a way of reading the cache is a (B, S) table of
slot numbers (:func:`codes`), a way of writing the new keys a (B, new) one (:func:`appended`); :func:`write`
and :func:`gather` turn them into the cache a call leaves and the keys it sees, in the oracle's order.
"""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import torch

SPARE = 3  # pages no table points to: the first and the last in memory, and one between


@dataclass(frozen=True)
class Layout:
    """Where a case's keys are: ``table`` (B, pages) long, ``block`` rows a page, ``lens`` keys in the cache per
    sequence before the ``new`` keys of this call go in (at positions lens[b] ... lens[b] + new - 1)."""

    name: str
    table: torch.Tensor
    block: int
    lens: tuple[int, ...]
    new: int

    @property
    def B(self) -> int:
        return self.table.shape[0]

    @property
    def S(self) -> int:
        return self.table.shape[1] * self.block

    @property
    def blocks(self) -> int:
        return self.table.numel() + SPARE

    @property
    def slots(self) -> int:
        return self.blocks * self.block


def layout(name: str, lens, new: int, block: int, S: int) -> Layout:
    """A shuffled page table for B = len(lens) sequences of S // block pages each."""
    B, n = len(lens), S // block
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    inner = 1 + torch.randperm(B * n + SPARE - 2, generator=g)  # every page but the first and the last
    return Layout(name, inner[:B * n].view(B, n), block, tuple(lens), new)


def codes(lay: Layout, table: torch.Tensor | None = None, shift: int = 0) -> torch.Tensor:
    """(B, S) the slot each key position j is read from, through ``table`` (default the case's), its page's column
    ``(j + shift) // block`` (kept on the table)."""
    t = lay.table if table is None else table
    rows = torch.arange(lay.S)
    column = ((rows + shift) // lay.block).clamp(0, t.shape[1] - 1)
    return t.long()[:, column] * lay.block + rows % lay.block


def appended(lay: Layout, read: torch.Tensor, shift: int | None = 0) -> torch.Tensor:
    """(B, new) the slots a call writes its new keys to when it reads the cache through ``read`` ((B, S), as
    :func:`codes`): positions lens[b] + shift ... of sequence b (-1: nowhere, for a position off the table, or
    for every one with ``shift`` None)."""
    out = torch.full((lay.B, lay.new), -1, dtype=torch.long)
    for b, c in enumerate(lay.lens):
        for t in range(lay.new):
            if shift is not None and 0 <= c + t + shift < lay.S:
                out[b, t] = read[b, c + t + shift]
    return out


def noise(lay: Layout, Hkv: int, D: int, which: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(every slot's contents where no key is put (slots, Hkv, D), what the new keys' slots hold before the call
    (B, new, Hkv, D)), float32 random numbers fixed by the case's name and ``which`` ("k" or "v"); not to be
    changed (drawn once a case)."""
    return _noise(lay.name, lay.slots, lay.B, lay.new, Hkv, D, which)


@functools.lru_cache(maxsize=16)
def _noise(name: str, slots: int, B: int, new: int, Hkv: int, D: int, which: str):
    g = torch.Generator().manual_seed(zlib.crc32(f"{name} {which}".encode()))
    return torch.randn(slots, Hkv, D, generator=g), torch.randn(B, new, Hkv, D, generator=g)


def memory(lay: Layout, keys: torch.Tensor, which: str, heads: int, dtype: torch.dtype | None = None,
           scale: float = 1.0) -> torch.Tensor:
    """(slots, Hkv, D): the cache's slots as the call receives them -- ``keys`` (B, Hkv, S, D, the oracle's order)
    in their pages but the new keys' slots, which still hold other numbers (``scale`` times the noise: keys as
    large as the case's); ``heads`` the case's key heads, the noise rounded to ``dtype`` (the case's) first."""
    B, Hkv, S, D = keys.shape
    pad, old = ((t * scale).to(dtype or keys.dtype).to(device=keys.device, dtype=keys.dtype)
                for t in noise(lay, heads, D, which))
    if Hkv != heads:  # keys whose heads were tiled (a GQA hypothesis): the noise tiled alike
        pad, old = pad.repeat(1, Hkv // heads, 1), old.repeat(1, 1, Hkv // heads, 1)
    mem = pad.clone()
    mem[codes(lay).reshape(-1).to(keys.device)] = keys.transpose(1, 2).reshape(B * S, Hkv, D)
    return write(lay, mem, appended(lay, codes(lay)), old)


def coded(lay: Layout, mem: torch.Tensor) -> torch.Tensor:
    """``mem`` with every slot no sequence's position reads (spare pages; a new key's slot before it is written)
    holding e_(D-1): a probe's code for "not a key of this call"."""
    out = mem.clone()
    used = torch.zeros(lay.slots, dtype=torch.bool)
    used[codes(lay).reshape(-1)] = True
    used[appended(lay, codes(lay)).reshape(-1)[appended(lay, codes(lay)).reshape(-1) >= 0]] = False
    out[~used.to(mem.device)] = 0
    out[(~used).to(mem.device), :, -1] = 1
    return out


def new_keys(lay: Layout, keys: torch.Tensor) -> torch.Tensor:
    """(B, new, Hkv, D): the keys this call appends (positions lens[b] ... of the oracle's (B, Hkv, S, D))."""
    return torch.stack([keys[b, :, c:c + lay.new] for b, c in enumerate(lay.lens)]).transpose(1, 2)


def write(lay: Layout, mem: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``mem`` with ``rows`` (B, new, Hkv, D) written at ``slots`` (B, new; -1 none), sequence by sequence (a
    slot written twice keeps the later)."""
    mem = mem.clone()
    for b in range(lay.B):
        for t in range(lay.new):
            if slots[b, t] >= 0:
                mem[int(slots[b, t])] = rows[b, t]
    return mem


def signature(lay: Layout, into: torch.Tensor, read: torch.Tensor, m: torch.Tensor) -> bytes:
    """What a way of writing (``into``) and reading (``read``) gives the attention under the mask ``m`` (B, 1, L,
    S), as bytes: for each key position some query sees, the slot read or the new key written there, and the
    mask -- two ways alike here give one answer."""
    src = read.clone()
    for b in range(lay.B):
        for t in range(lay.new):
            if into[b, t] >= 0:
                src[read == into[b, t]] = lay.slots + b * lay.new + t
    src[~m.any(dim=2)[:, 0]] = -1  # positions no query sees
    return src.numpy().tobytes() + m.numpy().tobytes()


def cache(lay: Layout, mem: torch.Tensor) -> torch.Tensor:
    """(blocks, block, Hkv, D): the slots as the cache tensor."""
    return mem.reshape(lay.blocks, lay.block, *mem.shape[1:])


def gather(mem: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """(B, Hkv, S, D): the keys a reading of the cache (``slots`` (B, S), :func:`codes`) sees, in the oracle's
    order."""
    return mem[slots.to(mem.device)].transpose(1, 2)
