"""How the learner's own function grows with the length: its time and peak memory at T = 128, 512 and 2048.

The lab asks for quadratic memory, measured. The matrix form holds the whole T x T matrix of scores,
so its memory grows like T² and doubling the context quadruples it. A loops version that keeps one
row of scores at a time grows more slowly -- and takes far longer: a Python step per query-key pair.
So each length is estimated from the one before (along T², the growth of every exact form's time)
and skipped, with the estimate, when it would take longer than :data:`BUDGET_S` (``attnlab lab check
--max-seconds N`` raises it: a loops version reaches T = 2048 in a few minutes); a call that takes
over a quarter of it is timed once, and its peak memory measured in that same call.

Forward only, one head of width 64, float32, without autograd; peak memory is the extra resident
memory while the call runs (:func:`attnlab.measure.memory.measure_peak`), the growth exponent the
least-squares slope on a log-log plot over the longer lengths, where the part that grows dominates
(:func:`attnlab.measure.growth.fit`). Every length is measured more than once -- the time over 2 to
5 calls, the peak 3 times -- so each exponent comes with the range its repeats allow, and a claim
about growth is made only where it holds over that whole range.
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from attnlab.measure import growth, memory
from attnlab.measure.timing import time_calls

from .grade import as_sdpa
from .result import Timing

SEQS = (128, 512, 2048)
BUDGET_S = 20.0  # the most one length may take (its calls together)
HEADS, HEAD_DIM = 1, 64
QUADRATIC = 0.25  # memory growth within this of T² -- for every repeat -- counts as quadratic
AGREE = 0.3  # time exponents whose repeats span more than this disagree: no growth is read from them
PEAKS = 3  # the peak memory is measured this many times at each length (once where a call is slow): its spread


def allowing(est: float) -> int:
    """A budget that lets a call estimated at ``est`` seconds run, with a quarter to spare for the estimate's error."""
    return math.ceil(est * 1.25)


def measure(fn, form: str, seqs=SEQS, budget_s: float = BUDGET_S, seed: int = 0) -> tuple[list[Timing], dict, str]:
    """(a Timing per length, the fitted growth {"time", "memory"} as :class:`~attnlab.measure.growth.Fit`
    or None, a note on how it was measured).

    Each fit is over the longer lengths, with the range of exponents its repeated measurements allow.
    """
    call = as_sdpa(fn) if form == "lab" else fn
    timings, per_call = [], None
    memory.exact_heap("cpu")
    try:
        for i, T in enumerate(seqs):
            if per_call is not None and i:
                est = per_call * (T / seqs[i - 1]) ** 2
                if est > budget_s:
                    timings.append(Timing(T, skipped=f"estimated {est:.3g} s a call (from T = {seqs[i - 1]}, "
                                                     f"growing like T²), over the {budget_s:g} s budget; "
                                                     f"--max-seconds {allowing(est)} lets it run"))
                    per_call = est
                    continue
            g = torch.Generator().manual_seed(seed + T)
            q, k, v = (torch.randn(1, HEADS, T, HEAD_DIM, generator=g) for _ in range(3))
            once = lambda q=q, k=k, v=v: call(q, k, v, is_causal=True)  # noqa: E731
            took = []

            def timed(once=once, took=took):
                t0 = time.perf_counter()
                out = once()
                took.append(time.perf_counter() - t0)  # the call alone, not the garbage collection before it
                return out

            with torch.no_grad():
                try:
                    peak = memory.measure_peak(timed, "cpu")  # the first call, timed and measured at once
                    if not took:  # memory is not measurable here, so measure_peak did not call it
                        timed()
                except Exception as e:  # the grading above says what is wrong with it
                    timings.append(Timing(T, skipped=f"it raised {type(e).__name__}: {str(e)[:80]}"))
                    break
                first = took[0]
                if first * 4 > budget_s:  # a slow call is its own measurement: another would only double the wait
                    times, peaks = [first], [peak]
                else:  # warmed up now: time a few, and measure the peak again (the first may hold one-time costs)
                    times = time_calls(once, 0, max(2, min(5, int(budget_s / 4 / max(first, 1e-6)))))
                    peaks = [memory.measure_peak(once, "cpu") for _ in range(PEAKS)]
            per_call = statistics.median(times)
            peaks = [p for p in peaks if p is not None]
            timings.append(Timing(T, per_call, int(statistics.median(peaks)) if peaks else None, times_s=list(times),
                                  peaks=peaks))
    finally:
        memory.exact_heap("cpu", exact=False)
    return (timings, *fitted(timings, budget_s))


def skip_note(T: int, prev: Timing, budget_s: float) -> Timing | None:
    """The length ``T`` skipped, with its estimate, when the call at the previous length says it would take over
    the budget (growing like T²); None when it fits."""
    if prev.time_s is None:
        return None
    est = prev.time_s * (T / prev.seq) ** 2
    if est <= budget_s:
        return None
    return Timing(T, skipped=f"estimated {est:.3g} s a call (from T = {prev.seq}, growing like T²), over the "
                             f"{budget_s:g} s budget; --max-seconds {allowing(est)} lets it run")


def fitted(timings: list[Timing], budget_s: float) -> tuple[dict, str]:
    """The growth fits of these timings and the note on how they were measured."""
    done = [t for t in timings if t.time_s is not None]
    fits = {"time": growth.fit({t.seq: t.times_s for t in done}),
            "memory": growth.fit({t.seq: t.peaks for t in done if t.peaks})}
    note = (f"forward only, batch 1, {HEADS} head of width {HEAD_DIM}, float32, no autograd; the median of 2 to "
            f"5 calls, one call where it takes over {budget_s / 4:g} s; memory: "
            f"{memory.method('cpu') or 'not measurable here'}, the median of {PEAKS}; growth fitted on the longer "
            "lengths, with the range of exponents the repeats allow")
    skipped = [t.seq for t in timings if t.skipped]
    if skipped:
        note += (f"; T = {', '.join(map(str, skipped))} skipped, over the {budget_s:g} s budget (--max-seconds) or "
                 "failing")
    return fits, note
