"""The learner's function in a process of its own: the lab's judged process.

``attnlab lab check`` never imports the learner's file: :func:`open_learner` starts this module as a
judged process (:mod:`attnlab.judge.apart.worker`), which loads the file once, from its source, says
which form it found (:func:`attnlab.lab.grade.form_of`), and then answers the judge's
requests -- the graded cases, and the lab's own two: ``rate`` (how long one query-key pair takes)
and ``measure`` (time and peak memory against length, :mod:`.measure`). Both are measured here, in
a process that runs the function, so the memory counted is the function's own -- ``measure`` in a new one
(:func:`fresh`), whose heap the grading has not fragmented -- and timed on the lab's thread count
(:data:`attnlab.lab.measure.THREADS`), set here, with the load beside each length.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from attnlab.judge.apart import remote, worker
from attnlab.judge.verify import JUDGE_THREADS

from . import files
from .result import Timing


@dataclass
class Learner:
    """The learner's function as the judge holds it: where it is, which form, and its process."""

    path: Path
    name: str
    form: str  # "lab" or "sdpa" (see grade.form_of)
    given: bool  # the starter's own code, unchanged
    functions: list  # the functions the file defines (for hints that name only what is there)
    fn: remote.Remote  # the function, in its process (already in F.sdpa's signature)
    level: str = "loops"  # the lab's level it is checked as (attnlab.lab.levels)

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc) -> None:
        self.fn.close()


def open_learner(spec: str, level: str | None = None) -> Learner:
    """Load ``FILE[:FUNCTION]`` in a judged process as the given level (None: the level the function's name
    says, :func:`levels.of_function`); :class:`files.LoadError` in one line when it cannot be."""
    from . import levels

    path, name = files.split(spec, None if level is None else levels.find(level).function)
    lv = levels.find(level) if level is not None else levels.of_function(name)
    if not path.is_file():
        raise files.LoadError(f"{path}: no such file" + (" (it is a folder)" if path.is_dir() else "") +
                              "; `attnlab lab start` writes attention_lab.py")
    try:
        source = path.read_text(encoding="utf-8-sig")  # (a BOM, as editors on Windows write, is not code)
    except (OSError, UnicodeDecodeError) as e:
        raise files.LoadError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if level is None and files.named(spec) is None and name not in (have := files.functions_in(source)):
        lv = levels.of_file(path, have, lv)  # FILE alone: the level this file is for (lab_matrix.py: attention_matrix)
        name = lv.function
    fn = _start(path, name, lv.name)
    given = lv.given(source, name)
    return Learner(path, name, fn.info["form"], given, files.functions_in(source), fn, lv.name)


def _start(path: Path, name: str, level: str = "loops") -> remote.Remote:
    from . import levels

    env = getattr(levels.find(level).module(), "environment", dict)()  # level 7: Triton's interpreter without a GPU
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the process starts with them (Triton reads its variable when a kernel is defined)
    try:
        # torch on one thread, as the judge's own process (attnlab.judge.verify.one_thread): then the process's CPU
        # time is its own time, which its budgets count (attnlab.judge.apart.pace), whatever the load
        return remote.start({"file": str(path), "function": name, "what": str(path), "level": level,
                             "threads": JUDGE_THREADS}, module=__name__)
    except remote.LoadFailed as e:
        raise files.LoadError(str(e)) from None
    finally:
        for k, was in saved.items():
            if was is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = was


@contextlib.contextmanager
def fresh(learner: Learner):
    """The learner's function in a new process of its own, for as long as the block runs: its memory is measured
    there. The process that was graded has a heap the grading fragmented: after ``malloc_trim`` the small blocks a
    call makes land on released pages all over it and fault them in again, up to 0.8 MiB of a peak that is not the
    call's (level 2's right matrix form read T = 512 at 2.4 to 3.2 MiB from one check to the next, and its growth as
    T^1.80 to T^1.99 against the level's 1.75). A new process's heap holds only its own start."""
    fn = _start(learner.path, learner.name, learner.level)
    try:
        yield replace(learner, fn=fn)
    finally:
        fn.close()


RATE_SECONDS = 30.0  # the small timing calls of rate, together (grade.per_pair)


def rate(learner: Learner, timeout: float | None = None) -> float | None:
    """Seconds per query-key pair, forward and backward (see grade.per_pair), measured in the learner's process.
    A process that hangs or ends here is started again, so that the graded case it fails on says how."""
    try:
        return learner.fn.ask("rate", seconds=timeout or RATE_SECONDS).get("per_pair")
    except remote.Raised:
        return None
    except remote.Lost:
        learner.fn.close()
        learner.fn = _start(learner.path, learner.name, learner.level)
        return None


MARGIN_S = 10.0  # beyond --max-seconds, for a length's first call that the estimate did not foresee


def measure(learner: Learner, seqs, budget_s: float, seed: int = 0,
            threads: int | None = None) -> tuple[list[Timing], dict, str]:
    """Time and peak memory in the learner's process (see measure.measure), one length a request, each within the
    budget and a margin: a call that hangs or sleeps ends the measurement at that length, said so; a length the
    previous one says would take over the budget is skipped with its estimate. Every length of ``seqs`` is in the
    timings: measured, or skipped with why. ``threads``: torch's thread count there (None: the lab's,
    :data:`attnlab.lab.measure.THREADS`)."""
    from . import measure as lab_measure

    timings: list[Timing] = []
    after = None  # (a length, its seconds a call, timed or estimated)
    for T in seqs:
        if after is not None:
            est, skip = lab_measure.skip_note(T, after, budget_s)
            if skip is not None:
                timings.append(skip)
                after = (T, est)
                continue
        try:
            reply = learner.fn.ask("measure", seconds=budget_s + MARGIN_S, basis=f"--max-seconds {budget_s:g} a "
                                   f"length, and {MARGIN_S:g} s to spare", seqs=[T], budget_s=budget_s, seed=seed,
                                   level=learner.level, threads=threads or lab_measure.THREADS)
        except remote.Lost:
            timings.append(Timing(T, skipped=f"no answer within {budget_s + MARGIN_S:g} s ({budget_s:g} s of "
                                             f"--max-seconds and {MARGIN_S:g} s to spare): it was stopped there"))
            timings = lab_measure.said_why(seqs, timings, f"not timed: the call at T = {T} was stopped")
            break
        got = [Timing.from_dict(t) for t in reply["timings"]]
        timings += got
        if got[-1].time_s is None:  # it raised: the grading says what is wrong with it
            timings = lab_measure.said_why(seqs, timings, f"not timed: {got[-1].skipped.split(':')[0]} at T = {T}")
            break
        after = (T, got[-1].time_s)
    fits, note = lab_measure.fitted(timings, budget_s)
    return timings, fits, note


def completed(reply: dict, seqs, count: int, load: float | None) -> dict:
    """A level's own measurement reply (:func:`attnlab.lab.levels.own.measure_lengths`) with the thread count and
    the load beside each timed length, and every length of ``seqs`` it did not reach said: after which call the
    measurement stopped, and how long that call took."""
    from . import measure as lab_measure

    timings = [Timing.from_dict({"threads": count, "load": load, **t}) for t in reply.get("timings", [])]
    last = next((t for t in reversed(timings) if t.time_s is not None), None)
    why = ("not timed: no length was" if last is None else
           f"not timed: the measurement stopped after T = {last.seq}, whose call took {last.time_s:.3g} s")
    timings = lab_measure.said_why(seqs, timings, why)
    where = lab_measure.conditions(timings)
    note = reply.get("note", "")
    return {**reply, "timings": [t.to_dict() for t in timings],
            "note": f"{note}; {where}" if note and where else note or where}


def _prepare(fn, job: dict, info: dict):
    from . import grade, levels

    level = levels.find(job.get("level") or "loops")
    if level.kind == "own":  # a level with its own cases asks for its own requests (see _level)
        info["form"], info["score_mod"] = "level", False
        return fn
    mod = level.module()
    if hasattr(mod, "sdpa"):  # a function of the level's own signature (level 4's (q, k, v, is_causal) -> (out, lse))
        info["form"], info["score_mod"] = "level", False
        info["runs"] = getattr(mod, "runs", lambda: None)()  # level 7: compiled on a GPU, or in the interpreter
        if hasattr(mod, "watch"):  # level 7: the answers must come from the file's own Triton kernel
            mod.watch(job["file"])
        wrapped = mod.sdpa(fn)
        wrapped.raw = fn
        return wrapped
    form = grade.form_of(fn)  # a LoadError when it is neither form: one line, as any other load error
    info["form"] = form
    if form == "lab":
        info["score_mod"] = False
        wrapped = grade.as_sdpa(level.module().wrap(fn))
        wrapped.raw = fn  # as the learner wrote it (measured with the level's own arguments)
        return wrapped
    return fn


def _rate(fn, header: dict) -> dict:
    """The seconds per query-key pair, on the lab's thread count: a small call split over torch's threads on a busy
    machine waits for them a few ms to tens of ms, a fixed cost that divided by its pairs read as the function 100
    to 1000 times slower than it is (and shrank cases it could finish)."""
    from . import grade, measure

    with measure.threads():
        return {"per_pair": grade.per_pair(fn)}


def _measure(fn, header: dict) -> dict:
    from . import levels, measure

    mod = levels.find(header.get("level") or "loops").module()  # (a level with cases of its own measures in _level)
    call, form = fn, "sdpa"
    if hasattr(mod, "measure_call") and hasattr(fn, "raw"):  # the level's own arguments (flash: block = 64)
        call, form = mod.measure_call(fn.raw), "lab"
    timings, fits, note = measure.measure(call, form, seqs=tuple(header["seqs"]), budget_s=header["budget_s"],
                                          seed=header["seed"], count=header.get("threads") or measure.THREADS)
    return {"timings": [t.to_dict() for t in timings], "fits": {k: f and f.to_dict() for k, f in fits.items()},
            "note": note}


def _level(fn, header: dict) -> dict:
    """A level's own requests, run on the learner's function or class here: an attention level's probes
    (:func:`.levels.slips.answers`), else its module's ``run`` (its own cases, level 4's lse and work); its
    measurement on :data:`attnlab.lab.measure.THREADS` thread, with the load beside it."""
    import functools

    from attnlab.results.host import load_average

    from . import levels, measure
    from .levels import beside, slips

    mod = levels.find(header["level"]).module()
    raw = getattr(fn, "raw", fn)  # as the learner wrote it
    if header.get("what") in ("probes", "beside"):  # the level's probes, or the cases set beside a named slip
        probes = mod.PROBES if header["what"] == "probes" else beside.cases(mod.PROBES)
        return {"probes": slips.answers(functools.partial(mod.probe_call, raw), probes, header["seed"])}
    if header.get("what") != "measure" or not getattr(mod, "SEQS", ()):  # (the module's "measure" trains it)
        return mod.run(raw, header)
    load = load_average()
    with measure.threads() as count:
        reply = mod.run(raw, header)
    return completed(reply, getattr(mod, "SEQS", ()), count, load)


if __name__ == "__main__":
    worker.main(prepare=_prepare, extra={"rate": _rate, "measure": _measure, "level": _level})
