"""Training on a grid of processes: data parallel across one axis, context parallel along the other.

W ranks form a grid of ``dp x cp`` (data parallel x context parallel), rank = dp_rank * cp + cp_rank,
so the ranks that share sequences are neighbours (on one machine, when torchrun fills machines in
order). Every rank draws the same global batch of B sequences of T tokens from the same generator
and keeps its part of it:

* **data parallel**: dp_rank keeps rows [dp_rank * B/dp, (dp_rank + 1) * B/dp);
* **context parallel**: cp_rank keeps its zigzag shard of every row (chunks cp_rank and
  2cp-1-cp_rank of 2cp, :mod:`attnlab.kernels.ring_layout`), T/cp tokens, and the model's
  attention is the ring form over the ranks of its row of the grid (:mod:`attnlab.nn.shard`).

Every rank then holds (B/dp) x (T/cp) tokens, the same number, and its loss is the mean over
them. The model is wrapped in PyTorch's ``DistributedDataParallel`` over the whole grid, which
averages every gradient across all W ranks after the backward pass. Under context parallelism a
rank's gradient already includes what its keys and values received from the other ranks' queries
(the ring backward sends it home), so the average over the grid is exactly the gradient of the
mean loss over the global batch: the run follows the single-process one step for step, to float
rounding. The optimizer then takes the same step on every rank, and the weights stay equal.

:class:`Grid` with ``world == 1`` is the single process: no group, no wrapper, nothing shared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

from attnlab.distributed.torchrun import under_torchrun, world_size
from attnlab.kernels.argcheck import is_int
from attnlab.kernels.ring_layout import check_divisible, shard
from attnlab.nn.shard import SeqShard

__all__ = ["LAYOUT", "Grid", "grid", "join", "under_torchrun", "world_size"]

LAYOUT = "zigzag"  # causal work balanced across the ranks of a sequence


@dataclass
class Grid:
    """Where this process sits in the grid of ranks, and the groups it talks in."""

    rank: int = 0
    world: int = 1
    cp: int = 1  # ranks that share each sequence (context parallel)
    backend: str = "none"
    cp_group: object = None  # the ranks of this rank's row of the grid (same dp_rank)

    @property
    def dp(self) -> int:
        return self.world // self.cp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.cp

    @property
    def cp_rank(self) -> int:
        return self.rank % self.cp

    @property
    def writer(self) -> bool:
        """Rank 0 alone writes logs, figures, JSON and checkpoints."""
        return self.rank == 0

    def describe(self) -> str:
        if self.world == 1:
            return "one process"
        return (f"{self.world} ranks over {self.backend}: data parallel {self.dp} x context parallel {self.cp}"
                + (f" ({LAYOUT} ring attention)" if self.cp > 1 else ""))

    def check(self, batch_size: int, block_size: int) -> None:
        """ValueError naming the numbers unless the global batch splits evenly over the grid."""
        if batch_size % self.dp:
            raise ValueError(f"batch_size {batch_size} does not split over {self.dp} data-parallel ranks; use a "
                             f"multiple of {self.dp}")
        if self.cp > 1:
            check_divisible(block_size, self.cp, LAYOUT, "block_size (the sequence length)")

    def split(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, SeqShard | None]:
        """This rank's part of a global batch (B, T) of inputs and targets, and the shard they form."""
        if self.world == 1:
            return x, y, None
        n = x.shape[0] // self.dp
        rows = slice(self.dp_rank * n, (self.dp_rank + 1) * n)
        x, y = x[rows], y[rows]  # (B/dp, T)
        if self.cp == 1:
            return x.contiguous(), y.contiguous(), None
        T = x.shape[1]
        part = SeqShard.of(self.cp_rank, self.cp, T, self.cp_group, LAYOUT)
        return shard(x, self.cp_rank, self.cp, LAYOUT, dim=1), shard(y, self.cp_rank, self.cp, LAYOUT, dim=1), part

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model under DistributedDataParallel over every rank (itself in one process)."""
        if self.world == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def mean(self, values: list[float], device) -> list[float]:
        """Each value averaged over every rank (each rank holds as many tokens, so this is the global mean)."""
        if self.world == 1:
            return list(values)
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return (t / self.world).tolist()

    def any(self, flag: bool, device) -> bool:
        """True on every rank when it is True on one (so that all stop at the same step)."""
        return self.mean([float(flag)], device)[0] > 0

    def broadcast(self, obj, device):
        """Rank 0's ``obj`` on every rank (pickled; used for a checkpoint read on rank 0 only)."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        cuda = torch.device(device).type == "cuda"
        dist.broadcast_object_list(box, src=0, device=torch.device("cuda", torch.cuda.current_device()) if cuda
                                   else None)
        return box[0]

    def gather(self, obj, device) -> list | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        every = [None] * self.world if self.writer else None
        dist.gather_object(obj, every, dst=0)
        return every


def join(cp: int, device: str, timeout_s: float) -> Grid:
    """Join the process group torchrun describes (NCCL with one GPU per process on CUDA, gloo on CPUs)."""
    import torch.distributed as dist

    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=timedelta(seconds=timeout_s))
    return grid(cp)


def grid(cp: int) -> Grid:
    """This rank's place in an initialised process group cut into rows of ``cp`` ranks; makes the row groups."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if not is_int(cp) or cp < 1 or world % cp:
        raise ValueError(f"context parallel {cp} does not divide the {world} ranks into rows; use a divisor of "
                         f"{world}")
    mine = None
    for row in range(world // cp):  # every rank creates every group, in the same order
        g = dist.new_group(list(range(row * cp, (row + 1) * cp)))
        if rank // cp == row:
            mine = g
    return Grid(rank, world, cp, dist.get_backend(), mine)
