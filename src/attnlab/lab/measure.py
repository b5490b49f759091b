"""How the learner's own function grows with the length: its time and peak memory at T = 128, 512 and 2048.

The lab asks for quadratic memory, measured. The matrix form holds the whole T x T matrix of scores,
so its memory grows like T² and doubling the context quadruples it. A loops version that keeps one
row of scores at a time grows more slowly -- and takes far longer: a Python step per query-key pair.
So each length is estimated from the one before (along T², the growth of every exact form's time)
and skipped, with the estimate, when it would take longer than :data:`BUDGET_S` (``attnlab lab check
--max-seconds N`` raises it: a loops version reaches T = 2048 in a few minutes); a call that takes
over a sixth of it (:data:`CALLS`) is timed once, and its peak memory measured in that same call. A length that
is not timed says why: skipped with its estimate, or left after a call that raised or was stopped.

It is timed on :data:`THREADS` thread. A small call split over several threads spends most of its
time waiting for them to start and to finish -- far more on a machine whose cores are busy with other
work, where a waiting thread may not run for milliseconds -- so its time says little about the
function, and the times of small and large calls do not grow as the work does. One thread does the
work in order, and the time grows as the work grows. The load of the machine (the 1-minute load
average, :func:`os.getloadavg`) is kept with every length: other programs' work is still in a time.

Forward only, one head of width 64, float32, without autograd; peak memory is the extra resident
memory while the call runs (:func:`attnlab.measure.memory.measure_peak`), the growth exponent the
least-squares slope on a log-log plot over the longer lengths, where the part that grows dominates
(:func:`attnlab.measure.growth.fit`). Every length is measured more than once -- the time over 2 to
5 calls, the peak 3 times -- so each exponent comes with the range its repeats allow, and a claim
about growth is made only where it holds over that whole range.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time

import torch

from attnlab.measure import growth, memory
from attnlab.measure.timing import time_calls
from attnlab.results.host import load_average

from .grade import as_sdpa
from .result import Timing

SEQS = (128, 512, 2048)
BUDGET_S = 20.0  # the most one length may take (its calls together)
HEADS, HEAD_DIM = 1, 64
QUADRATIC = 0.25  # memory growth within this of T² -- for every repeat -- counts as quadratic
TIMES_AGREE = 0.05  # a length's timed calls within 5 % of each other (the slowest over the fastest) agree: no more
AGREE = 0.3  # time exponents whose repeats span more than this disagree: no growth is read from them
PEAKS = 3  # the peak memory is measured this many times at each length (once where a call is slow; more where the
# least is not seen twice, see repeated_peaks), and the least kept: a high-water mark can only gain from what is not
# the call's (a matrix of another call's still mapped: a correct matrix form peaked 2.6 MiB once and 3.6 MiB
# twice at T = 512, its growth read as T^1.67, not T^1.93)
MORE_PEAKS = 6  # measured beyond PEAKS at a length whose least peak was not measured twice (its repeats disagree)
SAME_PEAK = 0.01  # peaks within this share of each other, and memory.MIN_FLOOR (64 KiB, what a CPU peak cannot tell
# from noise), are the same measurement: a right matrix form peaked 3104 KiB once and 3148 KiB eight times at T = 512
# on a busy machine, two pages apart no longer being the same
CALLS = 3 + PEAKS  # the calls a length measured more than once makes at least: the first (timed and its peak
# measured), two timed, PEAKS peaks. A length is measured so only where they all fit in its budget -- a call of at most
# a sixth of it -- and a slower call is its own measurement. (It was a quarter: a loops version's call of 4.8 s at
# T = 512 then made six calls, 29 s of a 20 s budget and a third of its check, where one of 5.1 s made one.)
THREADS = 1  # torch's threads while the learner's function is timed (the module docstring says why one)
SAID = 160  # the most characters of an error's message a skipped length quotes (cut at a word)


@contextlib.contextmanager
def threads(count: int = THREADS):
    """torch set to ``count`` threads inside the block, and back to what it was after it."""
    before = torch.get_num_threads()
    if before != count:
        torch.set_num_threads(count)
    try:
        yield count
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def allowing(est: float) -> int:
    """A budget that lets a call estimated at ``est`` seconds run, with a quarter to spare for the estimate's error."""
    return math.ceil(est * 1.25)


def shortened(text: str, most: int = SAID) -> str:
    """The first line of ``text``, cut at a space (never inside a word) with "…" when it is longer than ``most``."""
    line = (text.strip().splitlines() or [""])[0]
    if len(line) <= most:
        return line
    cut = line[:most].rsplit(" ", 1)[0] if " " in line[:most] else line[:most]
    return cut.rstrip(" ,;:") + " …"


def raised(e: BaseException) -> str:
    return f"it raised {type(e).__name__}: {shortened(str(e))}"


def skip_note(T: int, after: tuple[int, float], budget_s: float) -> tuple[float, Timing | None]:
    """(the estimated seconds a call at ``T``, the length skipped with that estimate when it is over the budget, else
    None), estimated along T² from ``after``: (a length, its seconds a call, timed or itself estimated)."""
    seq, seconds = after
    est = seconds * (T / seq) ** 2
    if est <= budget_s:
        return est, None
    return est, Timing(T, skipped=f"estimated {est:.3g} s a call (from T = {seq}, growing like T²), over the "
                                  f"{budget_s:g} s budget; --max-seconds {allowing(est)} lets it run")


def said_why(seqs, timings: list[Timing], why: str) -> list[Timing]:
    """``timings`` and, for every length of ``seqs`` they do not have, one that is skipped for ``why``."""
    have = {t.seq for t in timings}
    return timings + [Timing(T, skipped=why) for T in seqs if T not in have]


def measure(fn, form: str, seqs=SEQS, budget_s: float = BUDGET_S, seed: int = 0,
            count: int = THREADS) -> tuple[list[Timing], dict, str]:
    """(a Timing per length, the fitted growth {"time", "memory"} as :class:`~attnlab.measure.growth.Fit`
    or None, a note on how it was measured), on ``count`` threads (the lab's: :data:`THREADS`).

    Each fit is over the longer lengths, with the range of exponents its repeated measurements allow.
    """
    call = as_sdpa(fn) if form == "lab" else fn
    timings: list[Timing] = []
    after = None  # (a length, its seconds a call): what the next length is estimated from
    memory.exact_heap("cpu")
    try:
        with threads(count), memory.older_objects_set_aside():  # (each peak's collection: the calls' garbage alone)
            for T in seqs:
                if after is not None:
                    est, skip = skip_note(T, after, budget_s)
                    if skip is not None:
                        timings.append(skip)
                        after = (T, est)
                        continue
                timing = one_length(call, T, budget_s, seed)
                timings.append(timing)
                if timing.time_s is None:  # it raised (the grading says what is wrong with it): the rest are not run
                    timings = said_why(seqs, timings, f"not timed: {timing.skipped.split(':')[0]} at T = {T}")
                    break
                after = (T, timing.time_s)
    finally:
        memory.exact_heap("cpu", exact=False)
    return (timings, *fitted(timings, budget_s))


def one_length(call, T: int, budget_s: float, seed: int) -> Timing:
    """One length's Timing: the first call timed with its peak memory, then (a fast one) a few more, warmed up."""
    g = torch.Generator().manual_seed(seed + T)
    q, k, v = (torch.randn(1, HEADS, T, HEAD_DIM, generator=g) for _ in range(3))
    once = lambda q=q, k=k, v=v: call(q, k, v, is_causal=True)  # noqa: E731
    took, load = [], load_average()

    def timed():
        t0 = time.perf_counter()
        out = once()
        took.append(time.perf_counter() - t0)  # the call alone, not the garbage collection before it
        return out

    with torch.no_grad():
        try:
            peak = memory.measure_peak(timed, "cpu")  # the first call, timed and measured at once
            if not took:  # memory is not measurable here, so measure_peak did not call it
                timed()
        except Exception as e:  # the grading says what is wrong with it
            return Timing(T, skipped=raised(e), threads=torch.get_num_threads(), load=load)
        first = took[0]
        if first * CALLS > budget_s:  # a slow call is its own measurement: another would only double the wait
            times, peaks = [first], [peak]
        else:  # warmed up now: time a few, and measure the peak again (the first may hold one-time costs)
            times = agreed_times(once, max(2, min(5, int(budget_s / 4 / max(first, 1e-6)))))
            peaks = repeated_peaks(lambda: memory.measure_peak(once, "cpu"))
    peaks = [p for p in peaks if p is not None]
    return Timing(T, statistics.median(times), min(peaks) if peaks else None, times_s=list(times),
                  peaks=peaks, threads=torch.get_num_threads(), load=load)


def agreed_times(once, most: int) -> list[float]:
    """The seconds of 2 to ``most`` calls of ``once``: two, and one more at a time while they spread over more than
    :data:`TIMES_AGREE` (the slowest over the fastest). Calls that agree already say the length's time, and a third
    to fifth would say it again at the price of a call each (level 4's T = 8192: a second a call, a fifth of its
    check); calls that disagree -- a busy core, a collection -- are timed up to ``most`` times, as they always were,
    and the median kept."""
    times = time_calls(once, 0, min(2, most))
    while len(times) < most and max(times) > min(times) * (1 + TIMES_AGREE):
        times += time_calls(once, 0, 1)
    return times


def confirmed(peaks) -> bool:
    """Was the least of these peaks measured twice or more? A call's peak repeats exactly when nothing but the call
    is in it; a high-water mark can only gain from what is not the call's (a page of code faulted in again, a block
    the allocator kept), so the least one seen twice is the call's own."""
    peaks = [p for p in peaks if p is not None]
    if len(peaks) < 2:
        return False
    least = min(peaks)
    return sum(p <= least * (1 + SAME_PEAK) + memory.MIN_FLOOR for p in peaks) >= 2


def repeated_peaks(peak, first: int = PEAKS, more: int = MORE_PEAKS) -> list:
    """``first`` peaks of ``peak()`` (a measurement of one call), and up to ``more`` beyond them while the least is not
    :func:`confirmed`: a length whose repeats disagree is measured again until they decide it (issue 54)."""
    peaks = [peak() for _ in range(first)]
    while peaks and None not in peaks and not confirmed(peaks) and len(peaks) < first + more:
        peaks.append(peak())
    return peaks


def undecided(timings: list[Timing], lengths=None) -> list[int]:
    """The lengths (of ``lengths``, default all) whose repeated peaks never agreed on their least: the growth read
    through them is not decided by the measurements. A length measured once (a slow call) is not one of them."""
    return [t.seq for t in timings if len(t.peaks) >= 2 and not confirmed(t.peaks)
            and (lengths is None or t.seq in lengths)]


def conditions(timings: list[Timing]) -> str:
    """How the machine was while the lengths were timed: the thread count and the load, in words ("" when none was
    timed)."""
    done = [t for t in timings if t.time_s is not None]
    counts = sorted({t.threads for t in done if t.threads is not None})
    loads = [t.load for t in done if t.load is not None]
    said = []
    if counts:
        said.append(f"{' and '.join(map(str, counts))} torch thread{'s' if counts != [1] else ''}")
    if loads:
        span = f"{min(loads):.1f}" if f"{min(loads):.1f}" == f"{max(loads):.1f}" else \
            f"{min(loads):.1f} to {max(loads):.1f}"
        said.append(f"load {span} (1-minute average) as it was timed")
    return ", ".join(said)


def least_fit(peaks: dict) -> growth.Fit | None:
    """The memory's growth: the range the repeats allow, and the slope through the least peak at each length (see
    :data:`PEAKS`: a high-water mark only gains from what is not the call's), which lies within that range."""
    fit = growth.fit(peaks)
    if fit is None:
        return None
    fit.exponent = growth.exponent(list(fit.lengths), [min(peaks[T]) for T in fit.lengths])
    return fit


def fitted(timings: list[Timing], budget_s: float) -> tuple[dict, str]:
    """The growth fits of these timings and the note on how they were measured."""
    done = [t for t in timings if t.time_s is not None]
    fits = {"time": growth.fit({t.seq: t.times_s for t in done}),
            "memory": least_fit({t.seq: t.peaks for t in done if t.peaks})}
    where = conditions(timings)
    note = (f"forward only, batch 1, {HEADS} head of width {HEAD_DIM}, float32, no autograd"
            + (f", {where}" if where else "") + f"; the median of 2 to 5 calls, one call where it takes over "
            f"{budget_s / CALLS:.3g} s; memory: {memory.method('cpu') or 'not measurable here'}, the least of "
            f"{PEAKS} or more (until the least is measured twice); "
            "growth fitted on the longer lengths, with the range of exponents the repeats allow")
    skipped = [t.seq for t in timings if t.skipped]
    if skipped:
        note += f"; T = {', '.join(map(str, skipped))} not timed, each says why"
    return fits, note
