"""How long a training run will take, said before it starts: a few real steps, timed, then multiplied.

A formula from parameter counts and a guessed machine speed is wrong by factors on a shared CPU. So
:func:`estimate` builds the run's own model on its own data, takes one untimed step (first calls are
slow), times a few more and one log entry (losses, gradients, the entropy probe), and returns the
two costs; :meth:`Estimate.seconds` multiplies them out for the steps still to do. A machine that
gets busier later makes the run slower than said; the progress lines show that as it goes.

On a busy machine more threads can be slower: at load 8 a step took 5.0 s with 2 threads and 0.9 s
with 1. :func:`choose_threads` times the same steps at each thread count, taking turns (1, 2, 1, 2:
a burst of other work then hits both), and returns the faster with what it measured.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.results import Result


@dataclass
class Estimate(Result):
    step_s: float  # one optimizer step
    log_s: float  # one log entry (measurement and checkpoint)

    def seconds(self, steps: int, eval_every: int, variants: int = 1) -> float:
        logs = steps // eval_every + 2  # every eval_every steps, the first and the last
        return variants * (steps * self.step_s + logs * self.log_s)


@dataclass
class ThreadChoice(Result):
    threads: int  # the faster thread count, set for the rest of the process
    step_s: dict[str, float]  # thread count -> seconds a step, the least of its rounds
    load_before: list[float]  # the 1-minute load average before and after the timing
    load_after: list[float]


def _load() -> list[float]:
    import os

    return list(os.getloadavg()) if hasattr(os, "getloadavg") else []


def choose_threads(cfg, data, counts=(1, 2), rounds: int = 2, steps: int = 3) -> ThreadChoice:
    """Time ``steps`` steps of ``cfg``'s model at each thread count in ``counts``, ``rounds`` times taking turns;
    set torch to the faster count and return it with each count's step time: the least of its rounds (each round
    the median of its steps). A burst of other work slows a round, never speeds one: a median of two rounds took
    one slowed round half in -- 2 threads read 187 ms a step beside 64 ms for 1, and a build estimated for 1 thread
    ran its training at 2 (46 ms) in 60 % of the time it said."""
    import os

    counts = [c for c in counts if c <= (os.cpu_count() or 1)] or [1]
    before, times = _load(), {c: [] for c in counts}
    for _ in range(rounds):
        for c in counts:
            torch.set_num_threads(c)
            times[c].append(estimate(cfg, data, steps, log=False).step_s)
    step_s = {str(c): min(t) for c, t in times.items()}
    best = min(counts, key=lambda c: step_s[str(c)])
    torch.set_num_threads(best)
    return ThreadChoice(best, step_s, before, _load())


def estimate(cfg, data, steps: int = 5, log: bool = True, variant: dict | None = None) -> Estimate:
    """Time ``steps`` steps (their median: a burst of other work on a shared machine moves one step, not the
    estimate) and one log (``log=False``: none) of ``cfg``'s model (with ``variant``'s settings, such as
    ``{"sinks": True}``) on ``data`` (a Corpus); the weights are thrown away."""
    from attnlab.distributed.parallel import Grid
    from attnlab.train.train import _measure, _set_up, _step

    state = torch.random.get_rng_state()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            v = _set_up(cfg, "estimate", variant or {}, data, Path(tmp) / "estimate.pt", Grid())
            _step(v, 0)  # warm-up: the first call allocates and picks kernels
            times = []
            for s in range(steps):
                t0 = time.perf_counter()
                _step(v, s + 1)
                times.append(time.perf_counter() - t0)
            step_s, log_s = statistics.median(times), 0.0
            if log:
                t0 = time.perf_counter()
                _measure(v.model, v.net, v.fixed, v.log, 0, v.grid)
                v.save(0)
                log_s = time.perf_counter() - t0
    finally:
        torch.random.set_rng_state(state)
    return Estimate(step_s, log_s)

