"""A model's view of its part of each sequence, when the sequences are split across processes.

Context parallelism (Liu et al., "Ring Attention", 2023; Llama 3's context parallelism, Dubey et
al., 2024) cuts every sequence of a batch into pieces, one per rank of a process group, so that a
rank holds the activations of T/W tokens instead of T. Everything in a transformer but attention
is per-token -- embeddings, LayerNorm, the MLP, the loss -- and runs on the local tokens as it is.
Two things need to know where the local tokens really sit:

* **positions**: a token's position embedding (learned or RoPE) is that of its *global* position.
  In the zigzag layout rank r of W holds chunks r and 2W-1-r of the sequence, so its positions are
  not one range (:func:`attnlab.kernels.ring_layout.positions`).
* **attention**: a query must meet every key of the sequence, so attention becomes the ring form
  over the group (:mod:`attnlab.kernels.ring`), causal over the global positions.

:class:`SeqShard` carries both, and :meth:`attnlab.nn.GPT.forward` takes one as ``shard=``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlab.kernels.ring_layout import check_layout, positions


@dataclass(frozen=True)
class SeqShard:
    """This rank's part of every sequence: its global ``positions`` (T_local,), the ``group`` that shares the
    sequences (None: the whole world) and the ``layout`` they were cut in."""

    positions: torch.Tensor
    group: object = None
    layout: str = "zigzag"

    def __post_init__(self):
        p = self.positions
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.is_floating_point():
            raise ValueError("SeqShard.positions must be a 1-D integer tensor (one global position per local token)")
        check_layout(self.layout)

    @classmethod
    def of(cls, rank: int, world: int, length: int, group=None, layout: str = "zigzag") -> SeqShard:
        """The shard rank ``rank`` of ``world`` holds of sequences of ``length`` tokens."""
        return cls(positions(rank, world, length, layout), group, layout)
