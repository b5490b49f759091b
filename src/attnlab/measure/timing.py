"""Timing a call honestly, and the machine's own speed limit.

A first call is slower than the rest: code is loaded, memory is touched for the first time, a
compiled form compiles. So we run a **warm-up** first and do not time it. Then we time each call
alone with ``time.perf_counter``, and keep all the times: their median says what a call costs,
their min and max how much the machine disturbed the measurement. On a GPU a call only *queues*
work, so we wait for the device (``torch.cuda.synchronize``) before starting and stopping the clock.

How fast could it be? Attention is mostly matrix multiplies, so the rate a plain square matrix
multiply reaches on this machine, in this dtype, is the practical ceiling. :func:`matmul_peak`
measures it once; a form's GFLOP/s divided by it reads as "this much of what the machine can do".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from attnlab.measure.flops import matmul_flops


def alternate(calls: dict, rounds: int, warm=None) -> dict[str, list[float]]:
    """Two or more calls side by side: each of ``warm`` (default: all) once untimed, then ``rounds`` rounds that
    call every one in turn, the order reversed every other round so that none always runs first. A slow spell of
    the machine then slows neighbouring calls alike, and ratios of a round's times (paired medians) are steadier
    than ratios of medians. Returns name -> its seconds, one per round."""
    for name in calls if warm is None else warm:
        calls[name]()
    times: dict[str, list[float]] = {n: [] for n in calls}
    order = list(calls)
    for r in range(rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def time_calls(call: Callable[[], object], warmup: int, repeats: int, device: str = "cpu",
               before: Callable[[], None] | None = None, budget_s: float | None = None,
               min_repeats: int = 3) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls, each timed alone, after ``warmup`` untimed calls.

    ``before()`` runs ahead of every call, outside the clock (e.g. to clear gradients). With
    ``budget_s``, the timed calls stop early -- never before ``min_repeats`` of them -- once one more
    would take their total past the budget.
    """
    if warmup < 0 or repeats < 1:
        raise ValueError(f"time_calls needs warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    cuda = torch.device(device).type == "cuda"
    times: list[float] = []
    for i in range(warmup + repeats):
        if budget_s is not None and len(times) >= min_repeats and sum(times) + times[-1] > budget_s:
            break
        if before:
            before()
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        call()
        if cuda:
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def matmul_peak(dtype: torch.dtype = torch.float32, device: str = "cpu", n: int | None = None,
                repeats: int = 5) -> float:
    """This machine's matrix-multiply rate in GFLOP/s: the best of a few n x n products."""
    n = n or (4096 if torch.device(device).type == "cuda" else 1024)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(dtype).to(device) for _ in range(2))
    times = time_calls(lambda: a @ b, 1, repeats, device)
    return matmul_flops(n, n, n) / min(times) / 1e9


def bmm_rate(dtype: torch.dtype, batch: int, m: int, k: int, n: int, device: str = "cpu", repeats: int = 5) -> float:
    """GFLOP/s of a batched product (batch, m, k) @ (batch, k, n) in ``dtype``: the best of a few calls.

    At the shapes of an attention tile (8 heads x 256 queries x 64 dims against 256 keys) it says what one
    tile's matmuls reach in that dtype; a CPU without half-precision matrix units emulates bfloat16 and
    float16 ones, often many times slower than float32."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(batch, m, k, generator=g).to(dtype).to(device)
    b = torch.randn(batch, k, n, generator=g).to(dtype).to(device)
    times = time_calls(lambda: torch.bmm(a, b), 1, repeats, device)
    return batch * matmul_flops(m, n, k) / min(times) / 1e9
