"""Before ring attention starts: how much memory and time will it take, and does it fit?

A run at T = 262144 would take hours, one at T = 10⁹ asks for terabytes; both are better refused
in a second, with the numbers, than found out by the kernel's out-of-memory killer. The estimate
counts the tensors each phase keeps alive -- they are all O(T) now that the reference is computed
a slice of rows at a time (:mod:`attnlab.judge.oracle_rows`) -- and times the phases from this
machine's measured rate on one small tile loop, so it speaks for this machine, busy or not.

The phases run one after another:

* **ranks** -- W processes at once, each with the full-length inputs (every rank draws them from the
  seed), its shards, and the ring's working set: two key/value parts and, backward, two of their
  gradients. Time: the busiest rank's share of the work (under a causal mask the contiguous layout
  gives the last rank most of it), or the whole work over the cores when there are fewer cores
  than ranks;
* **flash** -- single-process flash at the full length, the comparison, one thread;
* **check** -- in this process: every rank's shards, PyTorch's answer, and the float64 oracle.

What does not fit is refused: more memory than ``FREE_FRACTION`` of what is free now, or a launch
estimated to outlast its deadline (``RingConfig.timeout_s``). Estimates are rough -- within a
factor of about two -- and printed as such.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attnlab.judge import oracle_rows
from attnlab.kernels.dtypes import DTYPES, compute_dtype
from attnlab.measure import memory
from attnlab.measure.flops import attention_flops
from attnlab.results import Result

FREE_FRACTION = 0.8  # of the memory free now, the most a run may plan to use
PROCESS_BYTES = 200 * 2**20  # a rank's own memory besides its tensors (torch's pages are shared with the forkserver)
TILE = 256  # flash's default tile edge
START_S = 3.0  # starting a launch's processes (each imports torch), on an idle machine
CHECK_BYTES = 64 * 2**20  # the first calls of the oracle and of PyTorch's attention in this process load code
PROBE_T = 1024  # the length at which this machine's rate is measured (smaller ones time overheads)


@dataclass(frozen=True)
class Estimate(Result):
    """Memory in bytes and time in seconds of each phase of :func:`attnlab.distributed.ring.run`."""

    rank_bytes: int
    ranks_bytes: int  # all ranks at once
    flash_bytes: int
    check_bytes: int
    peak_bytes: int  # the largest phase
    ranks_s: float
    flash_s: float
    check_s: float

    @property
    def total_s(self) -> float:
        return self.ranks_s + self.flash_s + self.check_s

    def describe(self) -> str:
        return (f"about {_size(self.peak_bytes)} at most ({_size(self.rank_bytes)} per rank, the reference "
                f"{_size(self.check_bytes)}) and about {_duration(self.total_s)} (ranks {_duration(self.ranks_s)}, "
                f"flash {_duration(self.flash_s)}, check {_duration(self.check_s)})")


def _size(b: float) -> str:
    for unit, k in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b / 2**10:.3g} KiB"


def _duration(s: float) -> str:
    if s >= 7200:
        return f"{s / 3600:.3g} h"
    if s >= 120:
        return f"{s / 60:.3g} min"
    return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"


def rates(cfg) -> tuple[float, float]:
    """FLOP/s of this machine: the flash tile loop on one thread in the run's dtype, and the float64 oracle."""
    from attnlab.kernels import flash

    dt = compute_dtype(DTYPES[cfg.dtype])  # half precision is computed in float32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, PROBE_T, cfg.head_dim, generator=g, dtype=dt) for _ in range(3))
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        t_flash = _best(lambda: flash.attention(q, k, v))
    finally:
        torch.set_num_threads(threads)
    t_oracle = _best(lambda: oracle_rows.reference(q, k, v, grad_out=q))
    f = attention_flops(1, 1, PROBE_T, PROBE_T, cfg.head_dim)
    return f / t_flash, 3.5 * f / t_oracle


def _best(fn, calls: int = 2) -> float:
    """The shortest of a few calls after a first one (which loads code paths), in seconds."""
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return max(min(times), 1e-6)


def _busiest_share(world: int, layout: str, causal: bool) -> float:
    """The busiest rank's share of the work of one step."""
    if not causal or layout == "zigzag":
        return 1.0 / world
    return (2 * world - 1) / world**2  # contiguous + causal: the last rank sees every earlier key


def estimate(cfg, rate: float | None = None, rate64: float | None = None) -> Estimate:
    """The memory and time of each phase (see the module notes); measures the rates unless given."""
    if rate is None or rate64 is None:
        rate, rate64 = rates(cfg)
    B, H, Hkv, T, d, W = cfg.batch, cfg.heads, cfg.hkv, cfg.seq, cfg.head_dim, cfg.world
    elem = torch.finfo(DTYPES[cfg.dtype]).bits // 8
    work = max(elem, 4)
    full = (2 * H + 2 * Hkv) * B * T * d  # elements of q, grad_out, k, v
    layouts = cfg.layouts()
    tiles = 3 * B * H * TILE * TILE * 4
    kept = len(layouts) * full * elem  # out (and dq, dk, dv) of every layout, gathered
    rank = PROCESS_BYTES + full * elem + 4 * T * B * H * d + kept // W \
        + 6 * (full // W) * work + 4 * (2 * B * Hkv * T * d // W) * work + tiles
    flash = PROCESS_BYTES + full * elem + 4 * T * B * H * d + 4 * full * work + tiles
    rows = max(1, oracle_rows.SLICE_BYTES // max(1, B * H * T * 8))
    # this process: the gathered shards, the inputs and PyTorch's answer with its gradients, the oracle's
    # float64 copies of inputs and answers, its slices of rows, and the float64 copies compare() makes
    check = CHECK_BYTES + kept + 5 * full * elem + 5 * full * 8 + 6 * min(rows, T) * B * H * T * 8
    parent_holds = kept + full * elem
    ranks = W * rank + PROCESS_BYTES
    peak = max(ranks, flash + parent_holds, check)

    mode = "forward+backward" if cfg.backward else "forward"
    step = attention_flops(B, H, T, T, d, causal=cfg.causal, mode=mode)
    calls = len(layouts) + (1 + cfg.warmup + cfg.repeats if cfg.measure else 0)
    cores = max(1, min(W, _cpus()))

    def call_s(layout: str) -> float:  # the busiest rank, or the whole work over the cores when they are fewer
        return step * max(_busiest_share(W, layout, cfg.causal), 1 / cores) / (rate * cfg.threads)

    ranks_s = START_S + sum(call_s(x) for x in layouts) + (calls - len(layouts)) * call_s(cfg.layout)
    flash_s = START_S + (2 + cfg.warmup + cfg.repeats) * step / rate / cfg.threads if cfg.measure else 0.0
    full_step = attention_flops(B, H, T, T, d, mode=mode)  # the oracle computes masked scores too
    check_s = full_step / rate64 + step / (rate * max(1, torch.get_num_threads()))
    return Estimate(int(rank), int(ranks), int(flash), int(check), int(peak), ranks_s, flash_s, check_s)


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def refusal(cfg, est: Estimate, available: int | None = None) -> str | None:
    """Why the run will not fit, in one line with the estimate and the limit; None when it fits."""
    available = memory.available_bytes("cpu") if available is None else available
    if available is not None and est.peak_bytes > FREE_FRACTION * available:
        return (f"T={cfg.seq} on {cfg.world} ranks needs {est.describe()}, more than the limit of "
                f"{_size(FREE_FRACTION * available)} ({FREE_FRACTION:.0%} of the {_size(available)} free now); "
                "try a smaller --seq or --batch, or fewer --heads")
    slow = max(est.ranks_s, est.flash_s)
    if slow > cfg.timeout_s:
        return (f"T={cfg.seq} on {cfg.world} ranks would take {est.describe()}; a launch is stopped after "
                f"{_duration(cfg.timeout_s)} (--time-limit); try a smaller --seq, --no-measure or a larger "
                "--time-limit")
    return None
