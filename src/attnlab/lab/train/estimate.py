"""How long a training run will take, said before it starts: a few real steps, timed, then multiplied.

A formula from parameter counts and a guessed machine speed is wrong by factors on a shared CPU. So
:func:`estimate` builds the run's own model on its own data, takes one untimed step (first calls are
slow), times a few more and one log entry (losses, gradients, the entropy probe), and returns the
two costs; :meth:`Estimate.seconds` multiplies them out for the steps still to do. A machine that
gets busier later makes the run slower than said; the progress lines show that as it goes.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.lab.results import Result


@dataclass
class Estimate(Result):
    step_s: float  # one optimizer step
    log_s: float  # one log entry (measurement and checkpoint)

    def seconds(self, steps: int, eval_every: int, variants: int = 1) -> float:
        logs = steps // eval_every + 2  # every eval_every steps, the first and the last
        return variants * (steps * self.step_s + logs * self.log_s)


def estimate(cfg, data, steps: int = 5) -> Estimate:
    """Time ``steps`` steps (their median: a burst of other work on a shared machine moves one step, not the
    estimate) and one log of ``cfg``'s model on ``data`` (a Corpus); the weights are thrown away."""
    from attnlab.lab.distributed.parallel import Grid
    from attnlab.lab.train.train import _measure, _set_up, _step

    state = torch.random.get_rng_state()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            v = _set_up(cfg, "estimate", {}, data, Path(tmp) / "estimate.pt", Grid())
            _step(v, 0)  # warm-up: the first call allocates and picks kernels
            times = []
            for s in range(steps):
                t0 = time.perf_counter()
                _step(v, s + 1)
                times.append(time.perf_counter() - t0)
            step_s = statistics.median(times)
            t0 = time.perf_counter()
            _measure(v.model, v.net, v.fixed, v.log, 0, v.grid)
            v.save(0)
            log_s = time.perf_counter() - t0
    finally:
        torch.random.set_rng_state(state)
    return Estimate(step_s, log_s)

