"""`attnlab tune`: the flash form's tile sizes for this processor, chosen by timing them side by side.

Three choices, each made on problems where it decides the time (batch 1, 8 heads, head dim 64, float32,
forward, the thread count given):

* the dense tiles at short lengths (block_q x block_k), on full and causal attention at T = 2048;
* the dense tiles at long lengths, on causal attention at T = 8192;
* the bands' query rows and batch (:mod:`attnlab.kernels.flash_band`), on sliding windows of 256 and 512 at
  T = 8192 (packed documents compute more scores on bands than on tiles, so they take the tiles whatever the
  bands' sizes, and would only add noise here).

Each candidate is called once to warm up, then ``rounds`` rounds call every candidate in turn (the order
reversed every other round, so neither side always runs first). A candidate's ratio on a problem is the median
over the rounds of its time over the default's in the same round; its score is the geometric mean of its ratios.
The best score is kept only when it is at most ``1 - margin``: a size that is not clearly faster is noise, and the
default stays. The choice is written to the cache :mod:`attnlab.kernels.tuned` reads, under this processor,
thread count and torch version, and the whole measurement to ``tune.json``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import attnlab
from attnlab import masks
from attnlab.kernels import flash_band, tuned
from attnlab.kernels.flash import DEFAULT_BLOCK_K, DEFAULT_BLOCK_Q
from attnlab.measure import timing
from attnlab.results import Result
from attnlab.results.files import CannotWrite
from attnlab.results.host import load_average, machine, versions

B, H, D = 1, 8, 64
TILES, BANDS = tuned.TILES, tuned.BANDS  # the candidates, the default first (their home: the cache refuses others)
MARGIN = 0.05


@dataclass
class Trial(Result):
    """One candidate on one problem: its median time, the default's, and the median of their ratios per round."""

    group: str
    candidate: str
    problem: str
    median_s: float
    default_s: float
    ratio: float


@dataclass
class Tuning(Result):
    sizes: dict  # tuned.Sizes, as written to the cache
    scores: dict  # group -> {candidate: geometric mean of its ratios}
    trials: list[Trial] = field(default_factory=list)
    rounds: int = 5
    margin: float = MARGIN
    threads: int = 1
    lengths: dict = field(default_factory=dict)  # group -> T
    seconds: float = 0.0
    load_average_before: float | None = None
    load_average_after: float | None = None
    cache: str | None = None  # the file the choice was written to, or None
    machine: dict = field(default_factory=machine)
    versions: dict = field(default_factory=versions)


def in_words(sizes: tuned.Sizes) -> str:
    """The sizes in words, the defaults filled in, and where they came from."""
    def tile(q, k):
        return f"{q or DEFAULT_BLOCK_Q} x {k or DEFAULT_BLOCK_K}"

    return (f"tiles {tile(sizes.short_q, sizes.short_k)} up to T = {tuned.SHORT}, {tile(sizes.long_q, sizes.long_k)} "
            f"above; bands of {sizes.band_rows or flash_band.BAND_BLOCK_Q} rows, "
            f"{(sizes.band_batch or flash_band.BATCH_SCORES) >> 10}K scores a batch ({sizes.source})")


def problems(short: int = 2048, long: int = 8192, sparse: int = 8192) -> dict:
    """group -> (T, {problem name: attention keyword arguments})."""
    return {"short tiles": (short, {f"full T={short}": {}, f"causal T={short}": {"is_causal": True}}),
            "long tiles": (long, {f"causal T={long}": {"is_causal": True}}),
            "bands": (sparse, {f"sliding_window({w}) T={sparse}": {"attn_mask": masks.sliding_window(w)}
                               for w in (256, 512)})}  # (packed documents take the tiles whatever the bands' sizes)


def candidates(group: str) -> dict:
    """name -> Sizes for each candidate of a group, the default first."""
    if group == "bands":
        return {f"{r} rows, {b >> 10}K scores": tuned.Sizes(band_rows=r, band_batch=b) for r, b in BANDS}
    if group == "short tiles":
        return {f"{q} x {k}": tuned.Sizes(short_q=q, short_k=k) for q, k in TILES}
    return {f"{q} x {k}": tuned.Sizes(long_q=q, long_k=k) for q, k in TILES}


def choose(scores: dict, margin: float = MARGIN) -> dict:
    """group -> the winning candidate's name: the best score when it is at most 1 - margin, else the default
    (each group's first)."""
    out = {}
    for group, by_name in scores.items():
        default = next(iter(by_name))
        best = min(by_name, key=by_name.get)
        out[group] = best if by_name[best] <= 1 - margin else default
    return out


def measure(rounds: int = 5, threads: int | None = None, margin: float = MARGIN, save: bool = True,
            lengths: dict | None = None, say: Callable[[str], None] = print) -> Tuning:
    """Time every candidate against the default, choose, and (``save``) write the choice to the cache."""
    if threads:
        torch.set_num_threads(threads)
    start, load0 = time.perf_counter(), load_average()
    groups = problems(**(lengths or {}))
    calls = {}  # (group, problem, candidate) -> a call
    for group, (T, probs) in groups.items():
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
        for prob, kw in probs.items():
            for name, sizes in candidates(group).items():
                calls[(group, prob, name)] = _call(q, k, v, kw, sizes)
    # the estimate: each default warmed up (a block map or band plan built), then timed once
    first = {}
    for (group, prob, name), call in calls.items():
        if name == next(iter(candidates(group))):
            call()
            first[(group, prob)] = _timed(call)
    n = {g: len(candidates(g)) for g in groups}
    estimate = sum(t * n[g] * (rounds + 1) for (g, _), t in first.items())
    say(f"tuning the flash form's tiles: {len(calls)} candidate calls x {rounds + 1}, about {estimate:.0f} s")
    trials, scores = [], {}
    for group, (_, probs) in groups.items():
        names = list(candidates(group))
        ratios = {name: [] for name in names}
        for prob in probs:  # (the default was warmed up for the estimate; the others warm up here)
            times = timing.alternate({name: calls[(group, prob, name)] for name in names}, rounds, warm=names[1:])
            base = times[names[0]]
            for name in names:
                ratio = statistics.median(a / b for a, b in zip(times[name], base, strict=True))
                ratios[name].append(ratio)
                trials.append(Trial(group, name, prob, statistics.median(times[name]), statistics.median(base),
                                    ratio))
            say(f"  {group:<12} {prob:<28} " + "  ".join(f"{name} {ratios[name][-1]:.2f}" for name in names[1:])
                + f"   (default {names[0]}: {statistics.median(base) * 1e3:.1f} ms)")
        scores[group] = {name: math.exp(statistics.fmean(math.log(x) for x in rs)) for name, rs in ratios.items()}
    won = choose(scores, margin)
    fields = {}
    for group, name in won.items():
        picked = candidates(group)[name]
        fields |= {f: getattr(picked, f) for f in picked.as_dict() if f != "source" and getattr(picked, f) is not None
                   and name != next(iter(candidates(group)))}
    cpu = machine()["cpu"]
    sizes = tuned.Sizes(**fields, source=f"measured by attnlab tune on {cpu}, {torch.get_num_threads()} threads, "
                                         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    cache = None
    if save and tuned.cache_path() is not None:
        existed = tuned.cache_path().exists()
        try:
            cache = str(tuned.save(sizes))
        except OSError as e:  # a disk that filled during the measurement: one line, the old cache kept
            raise CannotWrite(tuned.cache_path(), e.strerror or str(e), existed) from e
    return Tuning(sizes.as_dict(), scores, trials, rounds, margin, torch.get_num_threads(),
                  {g: T for g, (T, _) in groups.items()}, time.perf_counter() - start, load0, load_average(), cache)


def _call(q, k, v, kw: dict, sizes: tuned.Sizes) -> Callable[[], None]:
    def run():
        with torch.no_grad(), tuned.using(sizes):
            attnlab.attention(q, k, v, impl="flash", **kw)
    return run


def _timed(call: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def describe(t: Tuning) -> list[str]:
    """What was chosen, one line per group, with its score against the default."""
    lines = []
    for group, by_name in t.scores.items():
        default, *others = by_name
        won = choose({group: by_name}, t.margin)[group]
        if won == default:
            best = min(others, key=by_name.get)
            lines.append(f"{group}: the default, {default} (the best other, {best}, took {by_name[best]:.2f} of its "
                         f"time: not {1 - t.margin:.2f} or less)")
        else:
            lines.append(f"{group}: {won}, {by_name[won]:.2f} of the default's time ({default})")
    return lines
