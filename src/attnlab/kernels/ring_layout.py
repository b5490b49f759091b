"""Where each rank's part of the sequence lies, for ring attention: the two layouts and their helpers.

Ring attention splits the sequence of length T among W ranks. How it is split decides how much
work each rank does under a causal mask.

* **contiguous** -- rank r holds positions [r*T/W, (r+1)*T/W). Simple, but causal attention is
  lopsided: rank 0's queries see only its own keys, while the last rank's queries see everything,
  so the last rank does about W times the work of the first and the others wait for it.
* **zigzag** -- cut the sequence into 2W chunks; rank r holds chunk r and chunk 2W-1-r (one early,
  one late). Every rank then does the same amount of causal work. This is the layout of Llama 3's
  context parallelism (Dubey et al., "The Llama 3 Herd of Models", 2024); striped attention
  (Brandon et al., "Striped Attention: Faster Ring Attention for Causal Transformers", 2023) reaches
  the same balance by giving rank r every W-th token.

:func:`shard` cuts a full-length tensor into one rank's part, :func:`unshard` puts the parts back,
and :func:`positions` says which global positions a rank holds (what RoPE needs on a zigzag shard).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .argcheck import positive_int

LAYOUTS = ("contiguous", "zigzag")


def check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return layout


def pieces(layout: str) -> int:
    """How many chunks each rank holds: 1 (contiguous) or 2 (zigzag)."""
    return 1 if check_layout(layout) == "contiguous" else 2


def check_divisible(length: int, world: int, layout: str, what: str = "sequence length") -> None:
    """Raise a ValueError naming the numbers unless ``length`` splits evenly for this layout."""
    positive_int("world", world, "a positive number of ranks")
    parts = pieces(layout) * world
    if length % parts:
        how = f"world size {world}" if layout == "contiguous" else f"2 x world size = {parts} chunks"
        raise ValueError(f"{what} {length} is not divisible by the {how} ({layout} layout); "
                         f"use a multiple of {parts}, e.g. {parts * max(1, round(length / parts))}")


def chunk_ids(rank: int, world: int, layout: str) -> list[int]:
    """Global chunk numbers held by ``rank``, in the order they sit in its shard."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}) for world size {world}, got {rank}")
    return [rank] if check_layout(layout) == "contiguous" else [rank, 2 * world - 1 - rank]


def positions(rank: int, world: int, length: int, layout: str = "contiguous") -> torch.Tensor:
    """The global positions (int64, length/world of them) that ``rank`` holds of a length-``length`` sequence."""
    check_divisible(length, world, layout)
    c = length // (pieces(layout) * world)
    return torch.cat([torch.arange(i * c, (i + 1) * c) for i in chunk_ids(rank, world, layout)])


def shard(x: torch.Tensor, rank: int, world: int, layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """This rank's part of ``x`` along ``dim`` (the sequence dim, -2 for (..., T, E)); a new contiguous tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"shard needs a torch.Tensor, got {type(x).__name__}")
    T = x.shape[dim]
    check_divisible(T, world, layout)
    c = T // (pieces(layout) * world)
    parts = [x.narrow(dim, i * c, c) for i in chunk_ids(rank, world, layout)]
    return torch.cat(parts, dim=dim) if len(parts) > 1 else parts[0].clone(memory_format=torch.contiguous_format)


def unshard(shards: Sequence[torch.Tensor], layout: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """Put every rank's part (``shards[r]`` from rank r) back into the full-length tensor."""
    world = len(shards)
    if world == 0:
        raise ValueError("unshard needs one shard per rank, got none")
    n = pieces(layout)
    sizes = {tuple(s.shape) for s in shards}
    if len(sizes) != 1:
        raise ValueError(f"unshard needs equal shards from every rank, got shapes {[tuple(s.shape) for s in shards]}")
    if shards[0].shape[dim] % n:
        raise ValueError(f"a zigzag shard holds two equal chunks, but its length is {shards[0].shape[dim]} (odd)")
    chunks: list[torch.Tensor | None] = [None] * (n * world)
    for r, s in enumerate(shards):
        for i, part in zip(chunk_ids(r, world, layout), s.chunk(n, dim=dim), strict=True):
            chunks[i] = part
    return torch.cat(chunks, dim=dim)
