"""Time and peak memory of every form against the sequence length: the lesson's lab, as a tool.

For each length T (queries = keys = T) and each form, on the same seeded inputs (B, H, T, d):

* **time** -- warm-up, then repeated calls each timed alone (:mod:`attnlab.measure.timing`); we keep
  the median and the min / max spread. A case gets up to ``repeats`` timed calls, fewer (never
  under 3) when they would not fit the time budget. ``flex`` compiles during its warm-up;
* **rate** -- FLOPs from :mod:`attnlab.measure.flops` divided by the median time, and set against the
  machine's own matrix-multiply rate (measured at the start and again at the end; the better of
  the two is the machine's peak);
* **peak memory** -- measured around one more call by :mod:`attnlab.measure.memory`: the extra bytes
  the call needs over its inputs;
* **growth** -- the slope of log(cost) against log(T) per form (:mod:`attnlab.measure.growth`).

Before a case runs, its time and memory are estimated from the shorter lengths already measured
(time as T², memory along its measured slope, or as a few T x T matrices before any measurement);
a case that would not fit the time budget or the free memory is skipped with the reason, instead of
running for an hour or being killed by the operating system. The slow ``loops`` form is first
timed on a tiny problem so that its estimate exists from the start. Ctrl-C stops the sweep and
keeps every case measured so far.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from attnlab import kernels
from attnlab.kernels import masks as M
from attnlab.kernels import mods
from attnlab.kernels.argcheck import is_int, positive_int, seconds
from attnlab.kernels.dtypes import DTYPES, HALF, compute_dtype
from attnlab.measure import flex, growth, memory
from attnlab.measure.flops import attention_flops
from attnlab.measure.timing import matmul_peak, time_calls
from attnlab.results import Result, to_dict
from attnlab.results.host import load_average, machine, versions

MASKS = M.SPECS
MODS = ("softcap:CAP", "alibi")
FREE_FRACTION = 0.8  # a case may use at most this share of the memory that is free when it starts
PROBE = 16  # the tiny length at which a slow form is first timed
PEAK_PRODUCT_S = 0.25  # the longest one product of the matmul-peak measurement should take (CPU, default size)


@dataclass(frozen=True)
class BenchConfig:
    """What to measure. Change a field with ``dataclasses.replace``."""

    seq: tuple[int, ...] = (128, 512, 2048)
    impls: tuple[str, ...] | None = None  # None: every registered form, plus flex
    batch: int = 1
    heads: int = 8
    head_dim: int = 64
    dtype: str = "float32"
    causal: bool = False
    mask: str | None = None  # one of MASKS, e.g. "sliding_window:256"
    mod: str | None = None  # a score modifier, one of MODS: "softcap:30", "alibi"
    backward: bool = False  # time forward + backward together
    device: str = "cpu"
    threads: int | None = None  # torch intra-op threads; None keeps PyTorch's choice
    warmup: int = 1
    repeats: int = 5
    budget_s: float = 30.0  # the most one case (warm-up, repeats, memory call) may take
    memory_limit_bytes: int | None = None  # None: FREE_FRACTION of the memory free at each case
    seed: int = 0
    matmul_n: int | None = None  # n x n matmuls for the peak; None: 8192 on a GPU, on a CPU 2048 or less (peak_size)

    def __post_init__(self):
        if not self.seq or not all(is_int(t) and t >= 1 for t in self.seq):
            raise ValueError(f"seq must be one or more positive integer lengths, got {self.seq!r}")
        for name in ("batch", "heads", "head_dim", "warmup", "repeats"):
            positive_int(name, getattr(self, name))
        for name in ("threads", "matmul_n"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name))
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: choose from {', '.join(DTYPES)}")
        seconds("budget_s", self.budget_s)
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < 1:
            raise ValueError(f"memory_limit_bytes must be positive, got {self.memory_limit_bytes!r}")
        if self.causal and self.mask:
            raise ValueError("give either causal or a mask, not both (--mask causal is the mask-function twin)")
        make_mask(self.mask, max(self.seq))
        make_mod(self.mod, self.heads)
        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda (or cuda:N), got {self.device!r}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but PyTorch sees no CUDA device on this machine")
        known = known_impls()
        for name in self.impls or ():
            if name not in known:
                raise ValueError(f"unknown impl {name!r}; known forms: {', '.join(known)}")


    @property
    def half_flops(self) -> bool:
        """Causal work: half the L x S matrix (the causal masks are the same shape as is_causal when L == S)."""
        return self.causal or (self.mask or "").split(":")[0] in ("causal", "causal_lower_right")


@dataclass
class Row(Result):
    """One (form, length): the median and spread of its time, its rate, its measured extra peak."""

    impl: str
    seq: int
    time_s: float | None = None
    time_min_s: float | None = None
    time_max_s: float | None = None
    gflops: float | None = None
    peak_bytes: int | None = None
    skipped: str | None = None  # why the case was not measured; None when it was
    status: str = "measured"  # or why not, in one word: skipped, failed, unavailable, interrupted

    def __post_init__(self):
        if self.skipped is not None and self.status == "measured":
            self.status = "skipped"


@dataclass
class BenchResult(Result):
    machine: dict  # with memory_method and memory_noise_floor_bytes
    versions: dict
    config: dict
    matmul_gflops: float
    results: list[Row] = field(default_factory=list)
    exponents: dict = field(default_factory=dict)  # impl -> {"time": slope, "memory": slope}
    fit_lengths: dict = field(default_factory=dict)  # impl -> {"time": [T, ...], "memory": [T, ...]}: the fit's points

    @property
    def interrupted(self) -> bool:
        return any(r.status == "interrupted" for r in self.results)

    def rows(self, impl: str) -> list[Row]:
        return sorted((r for r in self.results if r.impl == impl), key=lambda r: r.seq)


def known_impls() -> list[str]:
    """Every registered form (a form registered later shows up here too), plus flex."""
    names = list(kernels.forms(device=None))  # a form that cannot run on the device is a skipped row, with why
    return names + ([flex.NAME] if flex.NAME not in names else [])


def make_mask(spec: str | None, T: int) -> M.Mask | None:
    """A mask function from a name (:func:`attnlab.kernels.masks.from_spec`), for length ``T``; None for None."""
    return None if spec is None else M.from_spec(spec, T)


def make_mod(spec: str | None, heads: int) -> mods.Mod | None:
    """A score modifier from a name: softcap:CAP (a positive number) or alibi (the geometric slopes)."""
    if spec is None:
        return None
    name, _, arg = spec.partition(":")
    if name == "alibi" and not arg:
        return mods.alibi(heads)
    if name == "softcap":
        try:
            return mods.softcap(float(arg))
        except ValueError:
            pass
    raise ValueError(f"unknown score modifier {spec!r}; choose from {', '.join(MODS)} (CAP a positive number)")


class _Case:
    """Seeded inputs for one length and the call that runs a form on them."""

    def __init__(self, cfg: BenchConfig, fn: Callable, B: int, H: int, T: int):
        g = torch.Generator().manual_seed(cfg.seed)
        dt, dev = DTYPES[cfg.dtype], cfg.device
        self.q, self.k, self.v = (torch.randn(B, H, T, cfg.head_dim, generator=g).to(dt).to(dev) for _ in range(3))
        self.grad_out = torch.randn(B, H, T, cfg.head_dim, generator=g).to(dt).to(dev) if cfg.backward else None
        for t in (self.q, self.k, self.v):
            t.requires_grad_(cfg.backward)
        self.fn, self.mask, self.causal, self.backward = fn, make_mask(cfg.mask, T), cfg.causal, cfg.backward
        mod = make_mod(cfg.mod, H)  # one per case: flex compiles it once, in the warm-up
        self.kw = {"score_mod": mod} if mod is not None else {}

    def clear_grads(self):
        self.q.grad = self.k.grad = self.v.grad = None

    def __call__(self):
        out = self.fn(self.q, self.k, self.v, self.mask, 0.0, self.causal, **self.kw)  # (B, H, T, d)
        if self.backward:
            out.backward(self.grad_out)
        return out


def fmt_bytes(n: float) -> str:
    """Bytes for people: 1.5 MiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def check_named(cfg: BenchConfig) -> None:
    """ValueError when a form ``cfg`` names could only be skipped: it cannot run on the device, or takes no score
    modifier under ``mod``. The command line asks this before a sweep, so that such a form is one line, not a run
    that measures nothing; :func:`sweep` itself records those forms as skipped rows that say why."""
    for name in cfg.impls or ():
        why = flex.unavailable() if name == flex.NAME else kernels.get(name).why_not(cfg.device)
        if why is not None:
            raise ValueError(f"impl {name!r} cannot run on {cfg.device} here: {why}")
        if cfg.mod and name != flex.NAME and not kernels.get(name).score_mod:
            able = [n for n in known_impls() if n == flex.NAME or kernels.get(n).score_mod]
            raise ValueError(f"impl {name!r} takes no score modifier (mod {cfg.mod!r}); forms that do: "
                             f"{', '.join(able)}")


def resolved(cfg: BenchConfig) -> BenchConfig:
    """``cfg`` as a sweep runs it, and bench.json holds it: each length once, in order; every form when none named."""
    return replace(cfg, seq=tuple(sorted(set(cfg.seq))), impls=tuple(cfg.impls or known_impls()))


def sweep(config: BenchConfig | None = None, progress: Callable[[str], None] | None = None,
          say: Callable[[str], None] | None = None) -> BenchResult:
    """Measure every (form, length) of ``config``; Ctrl-C returns what was measured so far.

    ``progress("matrix T=512")`` is called as each case starts.
    """
    cfg = resolved(config or BenchConfig())
    old_threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # peaks follow the live tensors, not blocks the heap keeps: every block of 64 KiB or more gets its own
    # mapping for the whole sweep (switched in the middle, the heap left before still shows in the peaks)
    exact = memory.exact_heap(cfg.device)
    try:
        result = _sweep(cfg, progress, say or (lambda text: None))
    finally:
        torch.set_num_threads(old_threads)
        if exact:
            memory.exact_heap(cfg.device, exact=False)
    if exact and result.machine.get("memory_method"):
        result.machine["memory_method"] += ", every block of 64 KiB or more its own mapping"
    return result


def _sweep(cfg: BenchConfig, progress, say: Callable[[str], None]) -> BenchResult:
    info = machine()
    floor = memory.noise_floor(cfg.device)
    info.update(memory_method=memory.method(cfg.device), memory_noise_floor_bytes=floor,
                load_average=load_average())  # others' work: noise
    sizes = peak_sizes(cfg)
    info["matmul_sizes"] = sizes
    say(f"measuring this machine's matmul peak ({', '.join(f'{k} {n} x {n}' for k, n in sizes.items())} products)")
    result = BenchResult(info, versions(), _config_dict(cfg), _peak(cfg, sizes))
    registered = kernels.forms(device=None)
    forms = {n: registered[n] if n in registered else kernels.Form(n, flex.attention, flex.SUMMARY)
             for n in cfg.impls}
    failed: dict[str, int] = {}  # form -> the length at which it raised
    todo = [(T, name) for T in cfg.seq for name in cfg.impls]
    try:
        for T, name in todo:
            if progress:  # called as each case starts, with what it is
                progress(f"{name} T={T}")
            result.results.append(_run_case(cfg, forms[name], T, result, failed, floor))
    except KeyboardInterrupt:
        done = {(r.seq, r.impl) for r in result.results}
        result.results += [Row(name, T, skipped="interrupted", status="interrupted") for T, name in todo
                           if (T, name) not in done]
    # the peak again: a busy moment during the first measurement would make every share too high
    say("measuring the matmul peak again")
    result.matmul_gflops = max(result.matmul_gflops, _peak(cfg, sizes))
    order = {n: i for i, n in enumerate(cfg.impls)}
    result.results.sort(key=lambda r: (order[r.impl], r.seq))
    for name in cfg.impls:
        rows = [r for r in result.rows(name) if r.skipped is None]
        mem = [r for r in rows if r.peak_bytes is not None and r.peak_bytes >= (floor or 0)]
        fits = {"time": growth.dominant([(r.seq, r.time_s) for r in rows]),
                "memory": growth.dominant([(r.seq, r.peak_bytes) for r in mem])}
        result.exponents[name] = {k: growth.exponent(*zip(*pts, strict=True)) if pts else None
                                  for k, pts in fits.items()}
        result.fit_lengths[name] = {k: [x for x, _ in pts] for k, pts in fits.items()}
    return result


def _peak_dtypes(cfg: BenchConfig) -> list[torch.dtype]:
    """Half precision on a CPU: it and float32, since many CPUs have no fast half-precision multiply
    and the forms then compute in float32."""
    cuda = torch.device(cfg.device).type == "cuda"
    return [DTYPES[cfg.dtype]] + ([torch.float32] if not cuda and DTYPES[cfg.dtype] in HALF else [])


def peak_sizes(cfg: BenchConfig) -> dict[str, int]:
    """n of the n x n products the peak is measured on, per dtype of :func:`_peak_dtypes`:
    ``cfg.matmul_n``, or 8192 on a GPU, or on a CPU 2048 -- for half precision made smaller where one
    product would take longer than PEAK_PRODUCT_S (on a CPU without fast half-precision units its
    products at 2048 took minutes). float32 keeps 2048: a busy core must not shrink a fast product."""
    names = [str(dt).removeprefix("torch.") for dt in _peak_dtypes(cfg)]
    if cfg.matmul_n or torch.device(cfg.device).type == "cuda":
        return dict.fromkeys(names, cfg.matmul_n or 8192)
    sizes = dict.fromkeys(names, 2048)
    if DTYPES[cfg.dtype] in HALF:
        n0 = 256
        a = torch.ones(n0, n0, dtype=DTYPES[cfg.dtype])
        one = min(time_calls(lambda: a @ a, 1, 3, cfg.device))
        n = n0 * (PEAK_PRODUCT_S / max(one, 1e-9)) ** (1 / 3)  # a product's time grows as n^3
        sizes[cfg.dtype] = int(min(2048, max(n0, n // 64 * 64)))
    return sizes


def _peak(cfg: BenchConfig, sizes: dict[str, int]) -> float:
    """GFLOP/s of the best n x n matmul, the better of the dtypes of :func:`_peak_dtypes`."""
    return max(matmul_peak(DTYPES[name], cfg.device, n=n, repeats=3) for name, n in sizes.items())


def _config_dict(cfg: BenchConfig) -> dict:
    """The config as bench.json holds it (lists, not tuples), so the result reads back equal to itself."""
    d = to_dict(cfg)
    d["flops"] = "4*B*H*L*S*d" + (" x 1/2 (causal)" if cfg.half_flops else "") + \
        (" x 3.5 (forward + backward)" if cfg.backward else "")
    return d


def _run_case(cfg: BenchConfig, form: kernels.Form, T: int, result: BenchResult, failed: dict,
              floor: int | None) -> Row:
    name = form.name
    if name == flex.NAME and flex.unavailable():
        return Row(name, T, skipped=f"unavailable: {flex.unavailable()}", status="unavailable")
    if name in failed:
        return Row(name, T, skipped=f"not tried: failed at T={failed[name]}", status="failed")
    why = form.why_not(cfg.device)
    if why is not None:
        return Row(name, T, skipped=f"unavailable: {why}", status="unavailable")
    if cfg.mod and name != flex.NAME and not form.score_mod:
        return Row(name, T, skipped=f"takes no score modifier (--mod {cfg.mod})")
    try:
        return _measure(cfg, form, T, result, floor)
    except Exception as e:  # a form that cannot run this case: say why, go on with the others
        if _caused_by_ctrl_c(e):  # e.g. torch.compile wraps a KeyboardInterrupt raised while it compiles
            raise KeyboardInterrupt from e
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        failed[name] = T
        return Row(name, T, skipped=f"failed: {type(e).__name__}: {msg}"[:200], status="failed")


def _caused_by_ctrl_c(e: BaseException | None) -> bool:
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _measure(cfg: BenchConfig, form: kernels.Form, T: int, result: BenchResult, floor: int | None) -> Row:
    name, B, H = form.name, cfg.batch, cfg.heads
    done = [r for r in result.rows(name) if r.skipped is None]
    per_call = growth.extrapolate([(r.seq, r.time_s) for r in done], T, lo=2.0)  # time grows as T^2
    if per_call is None and form.slow:
        per_call = _probe(cfg, form) * (T / PROBE) ** 2
    min_calls = _min_calls(cfg)
    if per_call is not None and per_call * min_calls > cfg.budget_s:
        return Row(name, T, skipped=f"estimated {per_call:.3g} s a call x {min_calls} calls > budget "
                                    f"{cfg.budget_s:g} s (--budget)")
    elem = torch.finfo(compute_dtype(DTYPES[cfg.dtype])).bits // 8  # half precision is computed in float32
    extra = growth.extrapolate([(r.seq, max(r.peak_bytes, floor or 0)) for r in done if r.peak_bytes is not None], T)
    if extra is None:  # nothing measured yet: a few T x T matrices, as the matrix form holds
        extra = B * H * T * T * elem * (10 if cfg.backward else 4)
    need = extra + (7 if cfg.backward else 3) * B * H * T * cfg.head_dim * elem  # + q, k, v (, grads, grad_out)
    free = memory.available_bytes(cfg.device)
    limit = cfg.memory_limit_bytes or (FREE_FRACTION * free if free else None)
    if limit is not None and need > limit:
        where = "--max-memory" if cfg.memory_limit_bytes else f"{FREE_FRACTION:.0%} of the memory free now"
        return Row(name, T, skipped=f"estimated {fmt_bytes(need)} > {fmt_bytes(limit)} ({where})")
    gc.collect()  # once per case: what earlier cases left in reference cycles goes now, not while timing
    case = _Case(cfg, form.fn, B, H, T)
    times = time_calls(case, cfg.warmup, cfg.repeats, cfg.device, case.clear_grads, budget_s=cfg.budget_s)
    case.clear_grads()
    peak = memory.measure_peak(case, cfg.device, collect=False)
    med = statistics.median(times)
    flops = attention_flops(B, H, T, T, cfg.head_dim, causal=cfg.half_flops,
                            mode="forward+backward" if cfg.backward else "forward")
    return Row(name, T, med, min(times), max(times), flops / med / 1e9 if med > 0 else math.inf, peak)


def _min_calls(cfg: BenchConfig) -> int:
    """The calls a case makes at the least: the warm-up, three timed (or all the repeats, if fewer), one for its
    memory; a case whose estimated calls do not fit the budget is skipped."""
    return cfg.warmup + min(3, cfg.repeats) + 1


def slow_forms_seconds(cfg: BenchConfig) -> float:
    """Seconds a sweep of ``cfg`` will spend on its slow forms (the loops form), decided as the sweep decides: each
    slow form is timed at length PROBE (as the sweep does first), its calls estimated as T^2 from there, a length
    whose calls do not fit the budget skipped with every longer one, and a length that fits timed for as many calls
    as :func:`attnlab.measure.timing.time_calls` makes within the budget, and one more for its memory. For an
    estimate made before the sweep (``attnlab lesson --build``): the slow form is most of a sweep's time where it
    fits, and none of it where it does not."""
    total, cfg = 0.0, resolved(cfg)  # every form when none is named, each length once, as the sweep runs them
    registered = kernels.forms(device=None)
    for name in cfg.impls:
        form = registered.get(name)  # (flex is built by the sweep itself, and is not slow)
        if form is None or not form.slow or form.why_not(cfg.device) is not None:
            continue
        t0 = time.perf_counter()
        per16 = _probe(cfg, form)
        total += time.perf_counter() - t0
        for T in cfg.seq:
            per_call = per16 * (T / PROBE) ** 2
            if per_call * _min_calls(cfg) > cfg.budget_s:
                break
            timed = min(cfg.repeats, max(min(3, cfg.repeats), math.floor(cfg.budget_s / per_call)))
            total += (cfg.warmup + timed + 1) * per_call
    return total


def _probe(cfg: BenchConfig, form: kernels.Form) -> float:
    """Seconds one call of a slow form takes at length PROBE with one batch element and one head, x B x H."""
    case = _Case(replace(cfg, batch=1, heads=1), form.fn, 1, 1, PROBE)
    return min(time_calls(case, 1, 1, cfg.device, case.clear_grads)) * cfg.batch * cfg.heads
