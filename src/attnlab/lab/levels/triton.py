"""Level 7, the kernel: FlashAttention-2's forward as a Triton kernel, ``flash_attention(q, k, v, is_causal)``.

The learner writes the body of a Triton kernel (one program per tile of queries, the key tiles
walked in a loop, the running max, sum and accumulator in registers); the wrapper that launches it
is the starter's. On a machine with a CUDA device the kernel runs compiled there; without one the
check starts the learner's process with ``TRITON_INTERPRET=1`` (:func:`environment`), and Triton's
interpreter runs the same kernel on the CPU with numpy -- correct, and slow, so the cases are small.
The check says which (:func:`runs`), and asks that every answer came from a kernel of the learner's own
(:func:`watch`): a file of PyTorch alone is refused, and an answer no such kernel's launch produced fails its case.

Graded by the same judge as every level, forward only (a kernel has no autograd): out on the
level's own cases (:func:`cases`: causal and not, L != S, lengths and head widths off the tiles,
non-contiguous inputs, float32, float16 and bfloat16) and the lse on cases of its own, each under
verify's rule, launched with 32 x 16 tiles (BLOCK_M != BLOCK_N, so a loop bound that mixes them up
shows). Its slips are named from its outputs on probes (:mod:`.tiles` computes each slip's answer
with the kernel's tiles): zero keys past the end left unmasked, a causal loop bound a tile short,
the mask left out inside the diagonal tile, the rescale, the finish. On a GPU its time is measured
at T = 1024 ... 8192 (float16, causal); the interpreter's time says nothing of the kernel's.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch

from attnlab.judge import Case
from attnlab.judge.cases import LARGE
from attnlab.kernels.interpreter import interpreting

from . import forwards, slips, tiles, ways

FORM = "the level's form, flash_attention(q, k, v, is_causal) -> (out, lse), a Triton kernel"
BACKWARD = False  # a kernel of the forward alone: the gradients are not judged
BLOCK_M, BLOCK_N = 32, 16  # the tiles the check launches the kernel with
SEQS = ()  # measured by the level itself (a GPU's clock), see measured()
GPU_SEQS = (1024, 2048, 4096, 8192)
TIMED = "float16, causal, batch 1, 8 heads of width 64"  # what a GPU times


def measures() -> str:
    """What the check says as it starts measuring: the GPU it times on, or that there is none to time on."""
    if device() == "cuda":
        return f"timing it on {torch.cuda.get_device_name()} ({TIMED}) at T = {', '.join(map(str, GPU_SEQS))}"
    return "not timing it: there is no CUDA device here, and Triton's interpreter says nothing of a GPU's time"
CASES_NOTE = ("the level's own: causal and not, L != S, lengths and head widths off the tiles, non-contiguous inputs, "
              "float32, float16 and bfloat16; forward only")
NAN = "nan-everywhere"


def environment() -> dict:
    """What the learner's process is started with: Triton's interpreter where there is no CUDA device."""
    return {} if torch.cuda.is_available() else {"TRITON_INTERPRET": "1"}


def device() -> str:
    return "cuda" if torch.cuda.is_available() and not interpreting() else "cpu"


def runs() -> str:
    """Where the kernel runs, in words (said by the check)."""
    if device() == "cuda":
        return f"compiled, on {torch.cuda.get_device_name()} (CUDA)"
    return "in Triton's interpreter on the CPU (no CUDA device here): the same kernel, run with numpy, slowly"


WATCHED: dict = {}  # in the learner's process (watch()): its file, and the launches of its own kernels so far


class NoKernel(RuntimeError):
    """The learner's flash_attention answered without launching a Triton kernel of its own."""


def watch(path) -> None:
    """In the learner's process: count each launch of a Triton kernel of the learner's own -- one whose source is
    neither attnlab's nor Triton's (its file's, or a module of its) -- so that :func:`call` can ask that every answer
    came from one. A file that has nothing of Triton is a LoadError: level 7 is the kernel, and an answer in
    PyTorch alone would pass every case."""
    import sys

    from attnlab.judge import LoadError

    if "triton" not in sys.modules and "triton" not in Path(path).read_text(encoding="utf-8-sig", errors="replace"):
        raise LoadError(f"{path} has no Triton in it: level 7 is FlashAttention's forward as a Triton kernel, "
                        "attention_kernel, that flash_attention launches (`attnlab lab start --level 7` writes it "
                        "with its TODOs)")
    WATCHED.update(path=str(path), launches=0)
    for cls in _launchers():
        if not getattr(cls.run, "counted", False):
            cls.run = _counted(cls.run)


def _launchers() -> list:
    """The classes whose ``run`` launches a kernel: ``kernel[grid](...)`` and an autotuner's call end there, compiled
    (JITFunction) or in the interpreter (InterpretedFunction)."""
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return [JITFunction]
    return [JITFunction, InterpretedFunction]


def _counted(run):
    def counted(self, *args, **kwargs):
        if not kwargs.get("warmup") and _own(self):
            WATCHED["launches"] += 1
        return run(self, *args, **kwargs)

    counted.counted = True
    return counted


def _own(kernel) -> bool:
    """A kernel the learner wrote: its source is in neither attnlab (its triton form) nor Triton."""
    import triton

    import attnlab

    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    if code is None:
        return False
    source = Path(code.co_filename).resolve()
    return not any(source.is_relative_to(Path(m.__file__).resolve().parent) for m in (attnlab, triton))


def call(fn, q, k, v, is_causal: bool):
    """The learner's (out, lse) on the kernel's device, back on the inputs' device; in the learner's process
    (:func:`watch`), :class:`NoKernel` where no kernel of the learner's own was launched to answer."""
    where = q.device
    dev = device()
    before = WATCHED.get("launches")
    got = forwards.pair(fn(*(t.to(dev) for t in (q, k, v)), bool(is_causal), BLOCK_M, BLOCK_N), "flash_attention",
                        "(out, lse)")
    if before is not None and WATCHED["launches"] == before:
        raise NoKernel("flash_attention launched no Triton kernel of yours: level 7 grades your kernel, "
                       "attention_kernel; launch it as the starter's wrapper does")
    return tuple(t.to(where) for t in got)


def sdpa(fn):
    return forwards.sdpa(lambda q, k, v, c: call(fn, q, k, v, c)[0], getattr(fn, "__name__", "flash_attention"))


def cases(quick: bool = False) -> list:
    """The graded cases: small, for the interpreter (a case of 2 x 2 x 64 x 64 takes it about a tenth of a second)."""
    base = [
        Case("causal", batch=(2,), H=2, L=64, E=32, is_causal=True),
        Case("full", batch=(2,), H=2, L=64, E=32),
        Case("off the tiles: L=37, S=45, E=24", batch=(1,), H=2, L=37, S=45, E=24),
        Case("L<S causal upper-left", batch=(1,), H=2, L=33, S=70, E=32, is_causal=True),
        Case("L>S causal upper-left", batch=(1,), H=2, L=70, S=33, E=32, is_causal=True),
        Case("head dim 40, Ev=24, causal", batch=(1,), H=2, L=50, E=40, Ev=24, is_causal=True),
        Case("head dim 24, Ev=40, causal", batch=(1,), H=2, L=45, E=24, Ev=40, is_causal=True),  # values wider
        Case("L=1", batch=(2,), H=2, L=1, S=65, E=32),
        Case("two batch dims, d = 8", batch=(2, 3), H=2, L=9, E=8),
        Case("large logits, causal", batch=(1,), H=2, L=50, E=32, is_causal=True, magnitude=LARGE),
        Case("scores in the thousands, causal", batch=(1,), H=2, L=40, E=8, is_causal=True, magnitude=30.0),
        Case("transposed views, causal", batch=(2,), H=2, L=40, E=32, is_causal=True, layout="transposed"),
        Case("float16, causal", batch=(1,), H=2, L=64, E=64, is_causal=True, dtype="float16"),
        Case("bfloat16, full, L<S", batch=(1,), H=2, L=40, S=72, E=64, dtype="bfloat16"),
    ]
    slow = ("L=1", "two batch dims, d = 8", "transposed views, causal")  # left out by --quick
    return [c for c in base if not (quick and c.name in slow)]


PROBES = (
    Case("probe, causal", batch=(1,), H=2, L=40, E=16, is_causal=True),
    Case("probe, full, S off the tile", batch=(1,), H=2, L=40, S=37, E=16),
    Case("probe, causal, L < S", batch=(1,), H=2, L=20, S=45, E=24, is_causal=True),
    Case("probe, causal, L > S", batch=(1,), H=1, L=45, S=20, E=16, is_causal=True),
    Case("probe, causal, L = 100", batch=(1,), H=1, L=100, E=16, is_causal=True),
    Case("probe, full, d = 32", batch=(1,), H=2, L=64, S=50, E=32),  # the head as wide as the tile
    Case("probe, large logits", batch=(1,), H=2, L=40, E=16, is_causal=True, magnitude=30.0),
)
LSE_CASES = (
    Case("causal, L > S", batch=(1,), H=2, L=50, S=37, E=32, is_causal=True),
    Case("full, off the tiles", batch=(2,), H=1, L=37, S=45, E=24),
    Case("causal, float16", batch=(1,), H=2, L=48, E=64, is_causal=True, dtype="float16"),
)


def probe_call(fn, q, k, v, case):
    out, lse = call(fn, q, k, v, case.is_causal)
    return {"out": out, "lse": lse}


TILE_SLIPS = [  # (key, one step of the kernel done wrong)
    ("pad-keys", tiles.Slip(pad=True)), ("edge-off-by-one", tiles.Slip(edge=1)),
    ("edge-length", tiles.Slip(edge_len=True)),
    ("bound-short", tiles.Slip(bound="short")),
    ("bound-block-n", tiles.Slip(bound="block-n")), ("diagonal-unmasked", tiles.Slip(causal="none")),
    ("causal-reversed", tiles.Slip(causal="reversed")),
    ("peeks-ahead", tiles.Slip(causal="ahead")), ("diagonal", tiles.Slip(causal="diagonal")),
    ("acc-not-rescaled", tiles.Slip(rescale_acc=False)),
    ("sum-not-rescaled", tiles.Slip(rescale_sum=False)), ("rescale-after-update", tiles.Slip(after=True)),
    ("max-not-carried", tiles.Slip(carry_max=False)),
    ("max-not-carried", tiles.Slip(carry_max=False, rescaled=True)), ("stale-max", tiles.Slip(stale="-inf")),
    ("stale-max", tiles.Slip(stale="zero")), ("stale-max", tiles.Slip(stale="first-new")),
    ("max-never-updated", tiles.Slip(update_max=False)),
    ("max-never-updated", tiles.Slip(update_max=False, bound="past-end")), ("lse-base2", tiles.Slip(lse="mixed")),
    ("mask-zero", tiles.Slip(fill=0.0)),
    ("tile-mask", tiles.Slip(local="keys")),
    ("tile-mask", tiles.Slip(local="rows")), ("tile-mask", tiles.Slip(local="both")),
    ("not-divided", tiles.Slip(divide="never")),
    ("lse-no-max", tiles.Slip(lse="sum")), ("lse-no-sum", tiles.Slip(lse="max")),
    ("lse-base2", tiles.Slip(lse="base2")),
    ("lse-base2", tiles.Slip(lse="log2-sum")), ("divide-axis", tiles.Slip(divide="columns")),
    ("rescale-inverted", tiles.Slip(alpha="inverted")),
]


def _tiled(slip):
    return lambda q, k, v, c: tiles.forward(q, k, v, c, BLOCK_M, BLOCK_N, slip)


def slip_list():
    """The kernel's own slips first (its tile edges, its loop bound, its online softmax), then attention's."""
    return [(key, _tiled(s)) for key, s in TILE_SLIPS] + [
        (key, f) for key, f in slips.common() if key != "unnormalised"]


def slip_pairs():
    return [(keys, _tiled(s)) for keys, s in ways.pairs(TILE_SLIPS)] + slips.common_pairs()


TEXT = {
    **slips.TEXT,
    **forwards.TEXT,
    "pad-keys": "your kernel gives weight to the keys past the end: the last tile reads zeros past S (the loads' "
                "mask), and a zero key scores 0, not -inf -- set the scores of offs_n >= S to -inf",
    "edge-off-by-one": "your edge mask lets one key past the end through: offs_n > S hides keys from S + 1 on, and key "
                       "S -- a zero the load's mask filled in -- scores 0 and takes weight; hide offs_n >= S",
    "edge-length": "your edge mask compares the keys with L, the number of queries, not S: where L > S the zeros "
                   "the load's mask filled in past S score 0 and take weight, and where L < S the keys from L on are "
                   "hidden; hide offs_n >= S",
    "divide-axis": "your final division broadcasts along the wrong axis: acc / l_i divides column e by row e's sum; "
                   "give l_i a column of its own, acc / l_i[:, None]",
    "bound-short": "your causal loop stops before the tile's own diagonal: the queries of the tile "
                   "[start_m, start_m + BLOCK_M) see keys up to start_m + BLOCK_M - 1, so loop to "
                   "min(S, (pid_m + 1) * BLOCK_M)",
    "bound-block-n": "your causal loop bound counts in BLOCK_N where the queries' tile is BLOCK_M: loop to "
                     "min(S, (pid_m + 1) * BLOCK_M)",
    "diagonal-unmasked": "your kernel stops its causal loop in the right place but does not mask inside the last "
                         "tile: a key after its query (offs_n > offs_m) must get -inf there",
    NAN: "your output is NaN on every row, even with small scores: an exp that meets the running max while it is "
         "still -inf gives inf -- exp(s - m_i) with m_i used before its update, or the rescale turned round, "
         "exp(m_new - m_i) -- and 0 × inf or inf / inf is NaN; take m_new first, p = exp(s - m_new), "
         "alpha = exp(m_i - m_new)",
}


def run(fn, header: dict) -> dict:
    """In the learner's process: the lse cases' values, or the kernel's times on the GPU."""
    if header.get("what") == "lse":
        return forwards.lse_values(lambda q, k, v, c: probe_call(fn, q, k, v, c)["lse"], LSE_CASES, header["seed"])
    if header.get("what") == "measure":
        return _time(fn) if device() == "cuda" else {"timings": [], "note": "not timed: " + runs() + "; its time "
                                                     "says nothing of the kernel's on a GPU"}
    raise ValueError(f"level 7 answers no request {header.get('what')!r}")


def extra_rows(ask, name: str, seed: int):
    reply = ask({"what": "lse", "seed": seed})
    rows = forwards.lse_rows(reply, LSE_CASES, name, seed)
    wrong = any(r.status != "pass" and not r.detail.startswith(NoKernel.__name__) for r in rows)  # (no kernel
    # launched: the graded cases' raises line says so, and alone); a tile slip whose lse the learner's is, on every
    # case where that slip's differs from the right one, is named from these rows too (the lse cases run more tiles
    # than the graded ones: a causal mask compared inside the tiles shows only here)
    stored = forwards.lse_stored(reply, LSE_CASES, rows, seed) if wrong else []  # its values a narrower dtype's
    return rows, ([*_lse_slips(reply, seed), *(stored or ["lse-wrong"])] if wrong else []), {}


def _lse_slips(reply: dict, seed: int) -> list[str]:
    """The tile slip whose lse the learner's lse cases are (the judge's reading rule, :mod:`attnlab.judge.readings`,
    on the lse alone), where one is: where several fit (a sum not rescaled, and no rescale at all, give one lse),
    none is named from here."""
    from attnlab.judge import oracle, readings
    from attnlab.judge import verify as V

    from .own import unpack

    got, right, xs = [], [], []
    for case, r in zip(LSE_CASES, reply.get("cases") or [{}] * len(LSE_CASES), strict=True):
        x = V.inputs(case, case.seed(seed))
        q, k, v = (t.double() for t in (x.q, x.k, x.v))
        right.append({"lse": oracle.answer(q, k, v, is_causal=case.is_causal)[1].lse.reshape(q.shape[:-1])})
        mine = unpack(r["lse"]).double() if "lse" in r else None
        got.append({"lse": mine} if mine is not None and mine.shape == right[-1]["lse"].shape else None)
        xs.append((q, k, v, case.is_causal))

    def lse_of(slip):
        def at(i):
            o = tiles.forward(*xs[i], BLOCK_M, BLOCK_N, slip)
            return None if o is None else {"lse": o["lse"].double()}
        return at

    found = readings.named(got, right, [c.dtype for c in LSE_CASES],
                           [(key, lse_of(s)) for key, s in TILE_SLIPS if s.lse == "right"])
    return found if len(found) == 1 else []  # (the lse holds m and l alone: slips alike there are not told apart)


def _time(fn) -> dict:
    """The kernel's time and the extra peak GPU memory of one call at each length: float16, causal, the median of
    10 calls after 3 warm-up calls, timed by CUDA events."""
    out = []
    for T in GPU_SEQS:
        g = torch.Generator(device="cuda").manual_seed(T)
        q, k, v = (torch.randn(1, 8, T, 64, generator=g, device="cuda", dtype=torch.float16) for _ in range(3))
        for _ in range(3):
            fn(q, k, v, True, 128, 64)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(q, k, v, True, 128, 64)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        peak = torch.cuda.max_memory_allocated() - base
        out.append({"seq": T, "time_s": statistics.median(times), "times_s": times, "peak_bytes": peak,
                    "peaks": [peak], "skipped": None})
    return {"timings": out, "note": f"compiled on {torch.cuda.get_device_name()}: one causal call, batch 1, 8 heads of "
                                    "width 64, float16, 128 x 64 tiles; the median of 10 calls (CUDA events)"}


def measured(learner, budget_s: float, seed: int):
    """(timings, fits, note) from the learner's process: the GPU's times, or why there are none."""
    from attnlab.measure import growth

    from ..result import Timing

    reply = learner.fn.ask("level", seconds=budget_s * len(GPU_SEQS) + 60, level="triton", what="measure")
    timings = [Timing.from_dict(t) for t in reply.get("timings", [])]
    fits = {"time": growth.fit({t.seq: t.times_s for t in timings}),
            "memory": growth.fit({t.seq: t.peaks for t in timings if t.peaks})}
    return timings, fits, reply.get("note", "")


def measured_ok(result) -> tuple[bool | None, str]:
    done = [t for t in result.timings if t.time_s is not None]
    if not done:
        return None, result.measure_note or "not timed"
    return True, "timed at T = " + ", ".join(f"{t.seq} ({t.time_s * 1e3:.3g} ms)" for t in done) + " on the GPU"
