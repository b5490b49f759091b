"""The levels with cases of their own (the module, flash backward, the decoder): run there, judged here.

Such a level's function is not attention in (q, k, v), so verify's grid cannot grade it. Its module
says how instead: ``run(fn, header)`` runs the learner's code on the level's cases where the code
lives (the learner's process, :mod:`attnlab.lab.judged`), from inputs drawn from the seed,
and sends back the values (:func:`pack`, plain numbers: nothing of the learner's crosses); here
``expect(case, seed)`` draws the same inputs and computes the right answers itself -- the float64
oracle, PyTorch or the library's module in the case's dtype -- and :func:`rows` holds the learner's
values to verify's tolerance rule. The slips are named as the attention levels' are
(:mod:`.slips`): the learner's values are what the slip's semantics give.
"""

from __future__ import annotations

import contextlib
import math
import re
import time

import torch

from attnlab.judge import Diagnosis, Row, VerifyResult, readings, rule
from attnlab.judge.facts import Facts
from attnlab.results.host import load_average, machine, versions

from ..measure import BUDGET_S
from ..result import LabResult, Timing
from . import slips


def pack(t: torch.Tensor) -> dict:
    """A tensor as plain values: its dtype, shape and numbers (float32 and bfloat16 are exact as Python floats)."""
    t = t.detach().cpu()
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "data": t.double().flatten().tolist()}


def unpack(d: dict) -> torch.Tensor:
    return torch.tensor(d["data"], dtype=torch.float64).reshape(d["shape"]).to(getattr(torch, d["dtype"]))


def said(e: BaseException) -> str:
    """What a row says of an exception the learner's code raised."""
    from attnlab.judge.apart import remote

    info = remote.raised(e)
    return f"{info['type']}: {info['message']}" + (f" ({info['where']})" if info.get("where") else "")


def compare(quantity: str, mine: torch.Tensor, theirs: torch.Tensor, ref: torch.Tensor, dtype, rounding=0.0):
    """verify's rule, with a shape that is not the answer's a failing comparison of its own."""
    return rule.compare(quantity, mine, theirs, ref, dtype, rounding)


RAISED = re.compile(r"(\w+(?:Error|Exception|Interrupt|Exit)): (.*?)(?: \(([^()]*)\))?", re.S)  # what said() writes


def row(name: str, case: str, dtype: str, comps: list, detail: str = "", error: str | None = None) -> Row:
    if error is not None:  # an exception the learner's code raised (as said() wrote it) is one, as verify's rows say
        m = RAISED.fullmatch(error)
        facts = Facts("raised", raised_type=m.group(1), raised_message=m.group(2)) if m else Facts()
        return Row(name, case, dtype, "error", detail=error, facts=facts)
    ok = bool(comps) and all(c.passed for c in comps)
    return Row(name, case, dtype, "pass" if ok else "fail", comparisons=comps, detail=detail)


def named(got: list[dict[str, torch.Tensor] | None], right: list[dict], slips, dtypes, pairs=()) -> list[str]:
    """The slips whose answers the learner's values are, by the judge's reading rule (:mod:`attnlab.judge.readings`:
    on every case where a slip differs from the right answer, each quantity the slip's, within the rule's reading
    tolerance for the case's dtype). ``slips``: (key, case index -> {quantity: float64 tensor} or None); ``dtypes``:
    each case's; ``pairs``: ((key, key), slip), two slips at once, tried where no single one is the learner's."""
    return readings.named(got, right, dtypes, slips, pairs)


def indices(header: dict, n: int):
    """The cases a grading request asks for: the one it names (``"case"``), else all ``n``."""
    return [header["case"]] if "case" in header else range(n)


def asker(learner):
    """``run`` for :func:`check` where the learner's code lives in its own process: each request with its budget and
    how it was set."""
    return lambda header, seconds, basis: learner.fn.ask("level", seconds=seconds, basis=basis, **header)


# how a grading request's budget was set, said with it where the machine held the function back past it
CASE_BASIS = "--max-seconds {:g} a case (" + f"{BUDGET_S:g}" + " s unless given)"


def graded(run, names: list[str], seed: int, level: str, budget_s: float) -> tuple[dict, str | None]:
    """The learner's answers to the level's cases, one request a case, each within ``budget_s`` seconds, then the
    level's ``extra`` request (the module's training): (the reply every level's ``judge`` reads, why the process
    was lost or None). A case that runs out of time or ends the process is an error that says so, and the cases
    after it are not run (their entries say why)."""
    from attnlab.judge.apart import remote

    cases: list[dict] = []
    for i, name in enumerate(names):
        try:
            cases += run({"level": level, "seed": seed, "what": "grade", "case": i}, budget_s,
                         CASE_BASIS.format(budget_s)).get("cases", [])
        except remote.Raised as e:
            cases.append({"error": e.text})
        except remote.Lost as e:
            timed = e.timed_out
            cases.append({"error": ran_out(e, budget_s) if timed else
                                   f"{e}: the code, or something it called, ended its process", "busy": e.busy})
            why = f"not run: the case {name!r} before it {'ran out of time' if timed else 'ended the process'}"
            cases += [{"skipped": why}] * (len(names) - i - 1)
            return {"cases": cases}, str(e)
    try:
        extra = run({"level": level, "seed": seed, "what": "extra"}, budget_s, CASE_BASIS.format(budget_s))
    except remote.Raised as e:
        extra = {"raised": e.text}
    except remote.Lost as e:
        said = ran_out(e, budget_s) if e.timed_out else f"{e}: the code, or something it called, ended its process"
        return {"cases": cases, "raised": said, "busy": e.busy}, str(e)
    return {"cases": cases, **extra}, None


def ran_out(e, budget_s: float) -> str:
    """What a case says of a request that ran out of time twice (:class:`attnlab.judge.apart.remote.Lost`): the
    machine's load where it held the function back, else the function's own time -- a hang."""
    spent = e.spent
    if e.busy:
        return (f"not decided: {spent.words()}, twice -- run it again on a quieter machine, or pass --max-seconds "
                f"{math.ceil(budget_s * 3)}")
    how = f", twice: {spent.words()}" if spent is not None else ""
    return (f"ran out of time: no answer within {budget_s:g} s of its own (--max-seconds {budget_s:g}){how}; is "
            "there an endless loop, or a wait?")


def timing_line(reply: dict) -> Diagnosis | None:
    """The likely-cause line of a level whose case ran out of time: the machine's load (busy), or a hang."""
    out = [c for c in reply.get("cases", []) if "error" in c and c["error"].startswith(("not decided", "ran out"))]
    raised = reply.get("raised", "")
    said = out[0]["error"] if out else raised if raised.startswith(("not decided", "ran out")) else None
    if said is None:
        return None
    if (out and out[0].get("busy")) or (not out and reply.get("busy")):
        return Diagnosis("busy", said.removeprefix("not decided: "))
    return Diagnosis("hangs", said)


@contextlib.contextmanager
def fresh_asker(learner):
    """``run`` for the measurement, in a new process of the learner's own (:func:`attnlab.lab.judged.fresh`: a heap
    the grading did not fragment), for as long as the block runs."""
    from attnlab.lab import judged

    with judged.fresh(learner) as clean:
        yield asker(clean)


def check(level, learner, run, judge, seed: int = 0, on_stage=None, measure=True,
          budget_s: float = 20.0, measured_in=None) -> LabResult:
    """The level's check of the learner's code: ``run(header, seconds, basis) -> reply`` runs it where it lives (the
    learner's process, or in a test this one) within ``seconds`` of its own, set as ``basis`` says; ``judge(reply,
    seed) -> (rows, diagnoses, match_err, note)``.
    ``budget_s``: the most each case and the measurement may take (--max-seconds); ``measured_in``: a context
    manager's factory that gives the ``run`` the measurement is made with (:func:`fresh_asker`; None: ``run``)."""
    from attnlab.judge import LoadError
    from attnlab.judge.apart import remote

    t0 = time.perf_counter()
    say = on_stage or (lambda text: None)
    say(f"found {learner.name} in {learner.path}: level {level.number} ({level.title})" + (
        "; it is the starter's code as it came, unchanged: what it scores is not yours" if learner.given else ""))
    mod = level.module()
    reply, lost = graded(run, [c[0] for c in mod.CASES], seed, level.name, budget_s)
    rows, found, err, note = judge(reply, seed)
    timed = timing_line(reply)
    if timed is not None:  # the machine's load or a hang, said first (never "the failures fit no pattern")
        found = [timed] + [d for d in found if d.key != timed.key]
    if learner.given:  # the starter's failures are not the learner's: it is told it is the starter, as at every level
        found = [slips.starter_line(level)]
    passed = bool(rows) and all(r.status == "pass" for r in rows) and lost is None
    timings, exps, how, load, curve = [], {"time": None, "memory": None}, "not measured: it did not pass", None, {}
    if passed and measure:
        say(f"measuring it: {mod.MEASURES} (at most {budget_s:g} s; --max-seconds changes it)")
        load = load_average()
        try:
            n = len(getattr(mod, "SEQS", (0,)))
            with (measured_in or (lambda: contextlib.nullcontext(run)))() as measuring:
                m = measuring({"level": level.name, "seed": seed, "what": "measure", "budget_s": budget_s},
                              budget_s * n + 5, f"--max-seconds {budget_s:g} a length, for {n} "
                              f"length{'s' * (n != 1)}, and 5 s to spare")
            timings = [Timing.from_dict(t) for t in m.get("timings", [])]
            exps, how, curve = m.get("exponents", exps), m.get("note", ""), m.get("curve", {})
            if curve and hasattr(mod, "library_curve"):
                curve["library"] = mod.library_curve(seed)
        except remote.Raised as e:
            how = f"not measured: {e.text}"
        except remote.Lost as e:
            how = f"not measured: {e} (--max-seconds {budget_s:g} a length)"
        except LoadError as e:
            how = f"not measured: its process for the measurement did not start ({e})"
    verify = VerifyResult(rows, machine(), versions())
    r = LabResult(str(learner.path), learner.name, "level", note, verify, found, err, passed, timings, exps, how,
                  time.perf_counter() - t0, {**machine(), "load_average": load}, versions(), given=learner.given,
                  ended=lost, functions=list(learner.functions), level=level.name, curve=curve)
    r.measured_ok, r.measured_note = mod.measured_ok(r)
    return r


def answered(r: dict, name: str, case: str, dtype: str) -> Row | None:
    """The row of a case the learner's code gave no values for (it raised, ran out of time, or was not run)."""
    if "error" in r:
        return row(name, case, dtype, [], error=r["error"])
    if "skipped" in r:
        return Row(name, case, dtype, "skipped", detail=r["skipped"])
    return None


def expect_like(out, like: torch.Tensor, what: str, want: str = "") -> torch.Tensor:
    """``out`` when it is a tensor of ``like``'s shape, dtype and device; else a TypeError saying which (``what``:
    what returned it, e.g. "step 3"; ``want``: the shape in the level's words, e.g. "(B, H, 1, d)")."""
    shape = tuple(like.shape)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{what} returned {type(out).__name__}, not a tensor")
    if tuple(out.shape) != shape:
        raise TypeError(f"{what} returned a tensor of shape {tuple(out.shape)}, not {want + ' = ' if want else ''}"
                        f"{shape}")
    if out.dtype != like.dtype or out.device != like.device:
        raise TypeError(f"{what} returned dtype {str(out.dtype).removeprefix('torch.')} on {out.device}, not the "
                        f"inputs' dtype {str(like.dtype).removeprefix('torch.')} on {like.device}")
    return out


def wrong_shape(mine: dict, right: dict) -> str | None:
    """What a failing row says of values whose shapes are not the answer's, or None when every one fits."""
    bad = [f"{n} has shape {tuple(mine[n].shape)}, not {tuple(right[n].shape)}" for n in right
           if n in mine and tuple(mine[n].shape) != tuple(right[n].shape)]
    return "; ".join(bad) or None


def lines(keys, text, rows=()) -> list[Diagnosis]:
    """The named slips' lines; where none is named, the precision the failing cases that did not raise lost, if
    that is what they show (:func:`unplaced`), else what they share; and a line for each exception the learner's
    code raised (:func:`raised`), which is what those cases show whatever else is named -- a slip read from the
    cases that ran does not say why the others raised."""
    out = [Diagnosis(k, text[k]) for k in dict.fromkeys(keys)]
    ran = [r for r in rows if r.facts.kind != "raised"]
    return (out or unplaced(ran) or shared(ran)) + raised(rows)


def raised(rows) -> list[Diagnosis]:
    """The "raises" lines verify's diagnosis gives the rows where the learner's code raised (one an exception, the
    most cases first, with how many and in which dtypes)."""
    from types import SimpleNamespace

    from attnlab.judge.diagnose import diagnose

    gone = [r for r in rows if r.facts.kind == "raised"]
    return [d for d in diagnose(SimpleNamespace(rows=gone), gone[0].form) if d.key == "raises"] if gone else []


def shared(rows) -> list[Diagnosis]:
    """["unclear"] where cases fail and nothing is named: what the failing cases share, which is always true -- how
    many fail of how many, in which dtypes, which quantities fail and which are right, the worst. Else []."""
    bad = [r for r in rows if r.status != "pass"]
    if not bad:
        return []
    dts = sorted({r.dtype for r in bad})
    where = ", ".join(dts) + (" only" if len(dts) < len({r.dtype for r in rows}) else "")
    failing = list(dict.fromkeys(c.quantity for r in bad for c in r.comparisons if not c.passed))
    compared = all(r.comparisons for r in rows)  # (a case that raised compared nothing: no "right in every case")
    right = [q for q in dict.fromkeys(c.quantity for r in rows for c in r.comparisons) if q not in failing] \
        if compared else []
    worst = max((c for r in bad for c in r.comparisons if not c.passed), key=lambda c: c.err / max(c.allowed, 1e-300),
                default=None)
    text = (f"no slip the lab knows is your function's: {len(bad)} of {len(rows)} cases fail ({where})"
            + (f"; failing: {', '.join(failing)}" if failing else "")
            + (f"; right in every case: {', '.join(right)}" if right else "")
            + (f"; worst: {worst.quantity} {worst.err:.3g} > {worst.allowed:.3g}" if worst else "")
            + (f"; e.g. {bad[0].case}" + (f": {bad[0].detail}" if bad[0].detail else "")))
    return [Diagnosis("unclear", text, len(bad), dts)]


def unplaced(rows) -> list[Diagnosis]:
    """["precision-unplaced"] where the failing cases are all of some dtypes, every case of another dtype passes,
    each failing quantity is off by a rounding's size and spread (:func:`attnlab.judge.diagnose.rounding_sized`), and
    a more precise dtype is among those that pass (or float64 alone fails, by float32's rounding): precision lost,
    which no slip placed -- said with each dtype's error as a multiple of PyTorch's. Else []."""
    from attnlab.judge import causes, diagnose
    from attnlab.judge.diagnose import PRECISION_ORDER

    bad = [r for r in rows if r.status != "pass"]
    dtypes = {r.dtype for r in rows}
    failing = {r.dtype for r in bad}
    passing = sorted(dtypes - failing)
    if not bad or not passing or any(r.status != "fail" or not diagnose.rounding_sized(r) for r in bad):
        return []
    rank = {d: PRECISION_ORDER.index(d) for d in dtypes if d in PRECISION_ORDER}
    finer = all(d in rank for d in dtypes) and max(rank[d] for d in passing) > max(rank[d] for d in failing)
    f32 = failing == {"float64"} and "float32" in passing and all(  # (a float32 step in a float64 call)
        diagnose.float32_sized(c) for r in bad for c in r.comparisons if not c.passed)
    if not (finer or f32):
        return []  # (a small formula error that a wide dtype's tolerance lets pass is no precision lost)
    group = {dt: [r for r in bad if r.dtype == dt] for dt in sorted(failing)}
    ratio = "; ".join(f"{dt}: {diagnose.ratio_words(g)}" for dt, g in group.items())
    text = causes.table()["precision-unplaced"].text.format(ratio=ratio, passing=f"every case in {', '.join(passing)} "
                                                                                  "passes")
    return [Diagnosis("precision-unplaced", text, len(bad), sorted(failing))]


def measure_lengths(seqs, seed: int, inputs, call, note: str, peaks: int = 3) -> dict:
    """Time and extra peak memory of ``call(*inputs(T, generator))`` at each length T (longer lengths stop once one
    takes over 20 s); the measurement reply a level's ``measure`` sends, with ``note`` and the growth exponents.

    The peak is the least of ``peaks`` calls where a call takes under a second (one call's high-water mark can
    hold another allocation's pages), the time the median of those calls."""
    import statistics

    from attnlab.measure import growth, memory

    from ..measure import repeated_peaks

    timings = []
    memory.exact_heap("cpu")
    try:
        with memory.older_objects_set_aside():  # (each peak's collection: the calls' garbage alone)
            for T in seqs:
                args, took = inputs(T, torch.Generator().manual_seed(seed + T)), []

                def once(args=args, took=took):
                    t0 = time.perf_counter()
                    r = call(*args)
                    took.append(time.perf_counter() - t0)
                    return r

                got = [memory.measure_peak(once, "cpu")]
                if not took:  # memory is not measurable here, so measure_peak did not call it
                    once()
                if took[0] < 1 and got[0] is not None:  # more, until the least is measured twice (measure.confirmed)
                    got = repeated_peaks(lambda once=once: memory.measure_peak(once, "cpu"), peaks)
                got = [p for p in got if p is not None]
                peak = min(got) if got else None  # the least: a high-water mark only gains from what is not the call's
                timings.append({"seq": T, "time_s": statistics.median(took), "times_s": took, "peak_bytes": peak,
                                "peaks": got, "skipped": None})
                if took[0] > 20:
                    break
    finally:
        memory.exact_heap("cpu", exact=False)
    exps = {"time": growth.exponent([t["seq"] for t in timings], [t["time_s"] for t in timings]),
            "memory": growth.exponent([t["seq"] for t in timings if t["peak_bytes"]],
                                      [t["peak_bytes"] for t in timings if t["peak_bytes"]])}
    how = memory.method("cpu") or "not measurable here"
    return {"timings": timings, "exponents": exps, "note": f"{note}; memory: {how}, the least of {peaks} calls or "
            "more (until the least is measured twice), the time their median"}
