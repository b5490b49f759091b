"""The ring attention experiment: W local processes, checked against one process, measured per rank.

:func:`run` starts W ranks on this machine (:mod:`attnlab.distributed.launch`: gloo over 127.0.0.1). Every
rank builds the same full-length inputs from the seed, keeps its own shard, and runs ring attention
(forward, and backward with ``backward=True``). The parent puts the shards back together and holds
them to the project's tolerance rule against the float64 oracle: the error may be at most twice
PyTorch's own on the same inputs, plus a rounding floor. The oracle is computed a slice of query
rows at a time (:mod:`attnlab.judge.oracle_rows`), so every phase needs O(T) memory; before anything
starts, :mod:`attnlab.distributed.budget` estimates memory and time and the CLI refuses what will not fit.

It then measures what ring attention is for. Per rank: the time of one step (the slowest rank
sets the pace), how much of it was spent waiting for a transfer, and the peak memory of the step,
inputs included -- against single-process flash at the same total length, measured the same way in
a process of its own. On the CPU the peaks are taken with glibc's mmap threshold fixed
(:func:`attnlab.measure.memory.exact_heap`), so that they follow the live tensors rather than the
heap's fragmentation.
The work per rank is counted by the kernel itself for both layouts: under a causal mask the
contiguous layout loads the last rank with most of it, the zigzag layout spreads it evenly.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attnlab.distributed import launch
from attnlab.judge import oracle_rows, rule
from attnlab.kernels import argcheck, flash
from attnlab.kernels import ring as ring_kernel
from attnlab.kernels.argcheck import positive_int
from attnlab.kernels.dtypes import DTYPES
from attnlab.kernels.ring_layout import LAYOUTS, check_divisible, check_layout, shard, unshard
from attnlab.kernels.ring_stats import RingStats
from attnlab.measure import memory
from attnlab.measure.timing import time_calls
from attnlab.results import Result
from attnlab.results.host import load_average, machine, versions

QUANTITIES = ("out", "dq", "dk", "dv")
FLOOR_ELEMENTS = 2**24  # scores (N*H*L*S) up to which the check computes the rule's rounding floor (1 x 4 x 2048^2)


@dataclass(frozen=True)
class RingConfig:
    world: int = 2
    seq: int = 2048  # total sequence length T, split across the ranks
    batch: int = 1
    heads: int = 4
    kv_heads: int | None = None  # None: as many as heads; fewer: grouped-query attention
    head_dim: int = 64
    causal: bool = False
    layout: str = "contiguous"
    backward: bool = False
    dtype: str = "float32"
    measure: bool = True  # time and peak memory per rank, and single-process flash for comparison
    repeats: int = 3
    warmup: int = 1
    threads: int = 1  # torch threads per rank, and for the single-process comparison
    device: str = "cpu"  # "cuda" under torchrun with GPUs: each rank on its own (LOCAL_RANK) device, NCCL
    seed: int = 0
    pg_timeout_s: float = 30.0  # process-group timeout: a transfer that cannot finish fails after this
    timeout_s: float = 600.0  # each launch (the ranks, then single-process flash) is stopped after this

    @property
    def hkv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    def validate(self) -> RingConfig:
        for name in ("world", "seq", "batch", "heads", "head_dim", "repeats", "threads"):
            positive_int(name, getattr(self, name))
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if self.hkv < 1 or self.heads % self.hkv:
            raise ValueError(f"kv_heads must divide heads (grouped-query attention), got {self.hkv} and {self.heads}")
        check_layout(self.layout)
        check_divisible(self.seq, self.world, self.layout)
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name, x in (("timeout (the process group's)", self.pg_timeout_s), ("launch timeout", self.timeout_s)):
            argcheck.seconds(name, x)
        return self

    def layouts(self) -> list[str]:
        """The chosen layout, then the other one when the length splits for it too."""
        other = [x for x in LAYOUTS if x != self.layout and self.seq % (self.world * (1 + (x == "zigzag"))) == 0]
        return [self.layout, *other]


@dataclass
class LayoutCheck(Result):
    layout: str
    comparisons: list[rule.Comparison]  # out (and dq, dk, dv), gathered from every rank
    work: list[dict]  # per rank, one forward: pairs / tiles computed and skipped, scores computed

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)

    @property
    def imbalance(self) -> float:
        """The busiest rank's scores over the mean: 1.0 is perfectly even."""
        s = [w["scores"] for w in self.work]
        return max(s) / statistics.mean(s)


@dataclass
class RankTiming(Result):
    rank: int
    time_s: float  # median of one step (forward, or forward + backward)
    time_min_s: float
    time_max_s: float
    compute_s: float  # of which in the flash tiles and merges (median)
    wait_s: float  # of which blocked on a transfer (median)
    peak_bytes: int | None  # the step's peak memory, this rank's inputs included


@dataclass
class RingResult(Result):
    config: dict
    layouts: list[LayoutCheck]  # the chosen layout first
    backend: str = "gloo on 127.0.0.1"  # how the ranks talked
    ranks: list[RankTiming] = field(default_factory=list)  # the chosen layout, when measured
    flash_time_s: float | None = None  # single-process flash, same total length and threads
    flash_peak_bytes: int | None = None
    memory_method: str | None = None
    noise_floor_bytes: int | None = None
    check_peak_bytes: int | None = None  # this process while it checks: the shards, PyTorch's answer, the oracle
    estimate: dict | None = None  # ring_budget.Estimate made before the run, to hold against what was measured
    seconds: float = 0.0
    machine: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(x.passed for x in self.layouts)

    @property
    def ring_time_s(self) -> float | None:
        """A step takes as long as its slowest rank."""
        return max(r.time_s for r in self.ranks) if self.ranks else None

    @property
    def memory_ratio(self) -> float | None:
        """The largest rank's peak over single-process flash's (1/W would be a perfect split)."""
        peaks = [r.peak_bytes for r in self.ranks]
        if not peaks or None in peaks or not self.flash_peak_bytes:
            return None
        return max(peaks) / self.flash_peak_bytes

    @property
    def overhead(self) -> float | None:
        """Ring time over a perfect split of flash's time across the ranks, minus 1."""
        if self.ring_time_s is None or not self.flash_time_s:
            return None
        return self.ring_time_s / (self.flash_time_s / self.lanes) - 1.0

    @property
    def lanes(self) -> int:
        """How many ranks can really run at once: one per GPU, or one per CPU core when there are fewer cores."""
        W = self.config["world"]
        return W if self.config["device"] == "cuda" else min(W, self.machine.get("cpu_count") or 1)


def inputs(cfg: RingConfig) -> tuple[torch.Tensor, ...]:
    """The full-length q, k, v and output gradient, the same in every process for one seed."""
    g = torch.Generator().manual_seed(cfg.seed)
    B, H, T, d = cfg.batch, cfg.heads, cfg.seq, cfg.head_dim
    shapes = [(B, H, T, d), (B, cfg.hkv, T, d), (B, cfg.hkv, T, d), (B, H, T, d)]
    return tuple(torch.randn(*s, generator=g).to(DTYPES[cfg.dtype]) for s in shapes)


def _step(impl: str, cfg: RingConfig, tensors, stats: RingStats | None = None, **kw):
    """One step on fresh copies of the inputs (so they count in its peak memory): forward (+ backward).

    Returns out, dq, dk, dv and a copy of ``stats`` as the forward left it.
    """
    q, k, v = (t.clone().requires_grad_(cfg.backward) for t in tensors[:3])
    fn = ring_kernel.attention if impl == "ring" else flash.attention
    extra = {"stats": stats, **kw} if impl == "ring" else {}
    out = fn(q, k, v, is_causal=cfg.causal, enable_gqa=cfg.hkv != cfg.heads, **extra)
    forward = dataclasses.replace(stats) if stats is not None else None
    if cfg.backward:
        out.backward(tensors[3])
    return out, q.grad, k.grad, v.grad, forward


def rank_case(rank: int, world: int, cfg: RingConfig) -> dict:
    """Inside one rank: ring attention in each layout, its output shards, its work, and (if asked) measurements."""
    import torch.distributed as dist

    memory.exact_heap(cfg.device)  # measured peaks follow the tensors; undone before timing
    launch.progress("drawing the inputs")
    full = inputs(cfg)
    done = {}
    step = "forward + backward" if cfg.backward else "forward"
    for layout in cfg.layouts():
        launch.progress(f"{layout} layout: {step}")
        mine = [shard(t, rank, world, layout).to(cfg.device) for t in full]
        out, dq, dk, dv, forward = _step("ring", cfg, mine, RingStats(), layout=layout)
        work = dataclasses.asdict(forward)  # one forward's work (the backward walks the same pairs again)
        done[layout] = {"out": out.detach().cpu(), "work": work}
        done[layout].update({n: g.cpu() for n, g in (("dq", dq), ("dk", dk), ("dv", dv)) if g is not None})
    if cfg.measure:
        mine = [shard(t, rank, world, cfg.layout).to(cfg.device) for t in full]
        log: list[RingStats] = []

        def timed_step():
            log.append(RingStats())
            launch.progress(f"measuring: step {len(log)} of {cfg.warmup + cfg.repeats + 1}")
            return _step("ring", cfg, mine, log[-1], layout=cfg.layout)

        dist.barrier()
        peak = memory.measure_peak(timed_step, cfg.device)
        memory.exact_heap(cfg.device, exact=False)
        times = time_calls(timed_step, cfg.warmup, cfg.repeats, cfg.device, before=dist.barrier)
        timed = log[-cfg.repeats:]
        done["timing"] = RankTiming(rank, statistics.median(times), min(times), max(times),
                                    statistics.median(s.compute_s for s in timed),
                                    statistics.median(s.wait_s for s in timed), peak)
    return done


def flash_case(rank: int, world: int, cfg: RingConfig) -> dict:
    """Single-process flash at the full length, measured as a rank is: peak memory, then time per step."""
    exact = memory.exact_heap(cfg.device)
    full = [t.to(cfg.device) for t in inputs(cfg)]
    calls = [0]

    def step():
        calls[0] += 1
        launch.progress(f"step {calls[0]} of {cfg.warmup + cfg.repeats + 2}")
        return _step("flash", cfg, full)

    step()  # load the code paths once: first touches are not the step's memory
    peak = memory.measure_peak(step, cfg.device)
    method = (memory.method(cfg.device) or "") + (", every block of 64 KiB or more its own mapping" if exact else "")
    floor = memory.noise_floor(cfg.device)
    memory.exact_heap(cfg.device, exact=False)
    times = time_calls(step, cfg.warmup, cfg.repeats, cfg.device)
    return {"time_s": statistics.median(times), "peak_bytes": peak, "method": method, "noise_floor_bytes": floor}


def check_case(cfg: RingConfig, per_rank: list[dict], progress=None) -> list[LayoutCheck]:
    """Gather each layout's shards and hold them to the tolerance rule against the float64 oracle.

    ``progress(text)`` is told how far the oracle is.
    """
    q, k, v, go = inputs(cfg)
    gqa = cfg.hkv != cfg.heads

    def rows(done: int, total: int) -> None:
        if progress is not None:
            progress(f"checking: the float64 oracle, query rows {done:,} of {total:,}")

    ref = oracle_rows.reference(q, k, v, is_causal=cfg.causal, enable_gqa=gqa, grad_out=go if cfg.backward else None,
                                progress=rows)
    ref = ref if cfg.backward else (ref,)
    if progress is not None:
        progress("checking: PyTorch's own answer")
    tq, tk, tv = (t.clone().requires_grad_(cfg.backward) for t in (q, k, v))
    theirs = F.scaled_dot_product_attention(tq, tk, tv, is_causal=cfg.causal, enable_gqa=gqa)
    if cfg.backward:
        theirs.backward(go)
    theirs = (theirs, tq.grad, tk.grad, tv.grad)
    # the rule's rounding floor needs the whole (N, H, L, S) forward in float64: where that is more than
    # FLOOR_ELEMENTS (the default problem's size), the limit is 2 x PyTorch's error and the storage floor alone
    n_scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]
    floors = rule.rounding_floor(q, k, v, is_causal=cfg.causal, enable_gqa=gqa, grad_out=go if cfg.backward else None,
                                 dtype=DTYPES[cfg.dtype]) if n_scores <= FLOOR_ELEMENTS else {}
    checks = []
    for layout in cfg.layouts():
        names = QUANTITIES if cfg.backward else QUANTITIES[:1]
        comps = [rule.compare(n, unshard([r[layout][n] for r in per_rank], layout), theirs[i], ref[i],
                              DTYPES[cfg.dtype], floors[n]) for i, n in enumerate(names)]
        checks.append(LayoutCheck(layout, comps, [r[layout]["work"] for r in per_rank]))
    return checks


def run(cfg: RingConfig, progress=None, estimate: dict | None = None) -> RingResult:
    """Launch ``cfg.world`` ranks, check ring attention against one process, and measure it (see the module notes).

    ``progress(text)``, if given, hears what is being done about twice a second; ``estimate`` (a
    :class:`attnlab.distributed.budget.Estimate` as a dict) is kept in the result.
    """
    cfg.validate()
    t0 = time.perf_counter()
    say = progress or (lambda text: None)
    kw = dict(timeout_s=cfg.timeout_s, pg_timeout_s=cfg.pg_timeout_s, threads=cfg.threads)

    def ranks(said: dict[int, str]) -> None:
        said = sorted(said.items())
        same = len({t for _, t in said}) == 1
        say(f"{len(said)} ranks: {said[0][1]}" if same else "; ".join(f"rank {r}: {t}" for r, t in said))

    per_rank = launch.results(launch.launch(rank_case, cfg.world, (cfg,), **kw, on_progress=ranks))
    single = None
    if cfg.measure:
        outcome = launch.launch(flash_case, 1, (cfg,), **kw, on_progress=lambda said: say(f"flash in one process: "
                                                                                           f"{said[0]}"))
        single = launch.results(outcome)[0]
    return finish(cfg, per_rank, single, t0, progress=say, estimate=estimate)


def finish(cfg: RingConfig, per_rank: list[dict], single: dict | None, t0: float,
           backend: str = "gloo on 127.0.0.1", progress=None, estimate: dict | None = None) -> RingResult:
    """From every rank's :func:`rank_case` and :func:`flash_case`: the checks and the comparison."""
    held: list = []
    peak = memory.measure_peak(lambda: held.append(check_case(cfg, per_rank, progress)))
    result = RingResult(dataclasses.asdict(cfg), held[0], backend, machine=machine(), versions=versions(),
                        check_peak_bytes=peak, estimate=estimate)
    if single is not None:
        result.ranks = [r["timing"] for r in per_rank]
        result.flash_time_s, result.flash_peak_bytes = single["time_s"], single["peak_bytes"]
        result.memory_method, result.noise_floor_bytes = single["method"], single["noise_floor_bytes"]
        result.machine["load_average"] = load_average()
    result.seconds = time.perf_counter() - t0
    return result
