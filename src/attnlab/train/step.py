"""What one training step costs on each rank of a grid: its peak memory and its tokens per second.

The point of context parallelism is memory: a rank holds the activations of T/cp tokens of each
sequence, so it can train on sequences cp times longer than one process holds. :func:`measure`
checks that claim by measurement, the way :mod:`attnlab.distributed.ring` does for attention alone: in each
rank, one full training step (forward, backward, gradient all-reduce, optimizer step) on a global
batch of random tokens, with the step's extra peak resident memory over what the process held
before it (:func:`attnlab.measure.memory.measure_peak`, blocks of 64 KiB or more on their own pages so
the peak follows the live tensors), then the time of a few steps. :func:`run` launches the grid and
one process alone on the same global batch and returns both.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from attnlab.distributed import launch
from attnlab.distributed.parallel import Grid, grid
from attnlab.measure import memory
from attnlab.measure.memory import exact_heap
from attnlab.train.train import TrainConfig, _loss, _optimizer


@dataclasses.dataclass
class StepCost:
    """One rank's step: ``peak_bytes`` over what the process held before (weights, optimizer state, data)."""

    rank: int
    peak_bytes: int | None
    step_s: float  # median over the timed steps; every rank waits for the slowest at the all-reduce
    tokens_per_s: float  # the global batch's tokens over step_s


def measure(cfg: TrainConfig, vocab_size: int, g: Grid, repeats: int = 3) -> StepCost:
    """One rank's cost of a training step of ``cfg``'s model on a random global batch (call on every rank)."""
    from attnlab.nn import GPT

    exact_heap(cfg.device)
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model(vocab_size)).to(cfg.device)
    net, opt = g.wrap(model), _optimizer(model, cfg)
    x = torch.randint(vocab_size, (cfg.batch_size, cfg.block_size + 1), generator=torch.Generator().manual_seed(0))
    x, y = x[:, :-1].to(cfg.device), x[:, 1:].to(cfg.device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = _loss(net, g, x, y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    step()  # the optimizer's state and the code paths exist before the step is measured
    g.mean([0.0], cfg.device)  # every rank at the start line
    peak = memory.measure_peak(step, cfg.device)
    exact_heap(cfg.device, exact=False)
    times = []
    for _ in range(repeats):
        g.mean([0.0], cfg.device)
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    return StepCost(g.rank, peak, t, cfg.batch_size * cfg.block_size / t)


def _rank(rank: int, world: int, cfg: TrainConfig, vocab_size: int, cp: int, repeats: int) -> StepCost:
    return measure(cfg, vocab_size, grid(cp), repeats)


def run(cfg: TrainConfig, vocab_size: int, dp: int, cp: int, repeats: int = 3, threads: int = 1,
        timeout_s: float = 600.0) -> dict:
    """Each rank's :class:`StepCost` on a ``dp x cp`` grid, and one process alone on the same global batch."""
    Grid(0, dp * cp, cp).check(cfg.batch_size, cfg.block_size)
    kw = dict(timeout_s=timeout_s, pg_timeout_s=timeout_s, threads=threads)
    ranks = launch.results(launch.launch(_rank, dp * cp, (cfg, vocab_size, cp, repeats), **kw))
    one = launch.results(launch.launch(_rank, 1, (cfg, vocab_size, 1, repeats), **kw))[0]
    return {"ranks": ranks, "one": one}
