"""The learner's function in a process of its own: the lab's judged process.

``attnlab lab check`` never imports the learner's file: :func:`open_learner` starts this module as a
judged process (:mod:`attnlab.judge.worker`), which loads the file once, from its source, says
which form it found (:func:`attnlab.lab.grade.form_of`), and then answers the judge's
requests -- the graded cases, and the lab's own two: ``rate`` (how long one query-key pair takes)
and ``measure`` (time and peak memory against length, :mod:`.measure`). Both are measured here, in
the process that runs the function, so the memory counted is the function's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnlab.judge import remote, worker

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
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise files.LoadError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if level is None and files.named(spec) is None and name not in (have := files.functions_in(source)):
        lv = levels.of_file(path, have, lv)  # FILE alone: the level this file is for (lab_matrix.py: attention_matrix)
        name = lv.function
    fn = _start(path, name, lv.name)
    given = files.given_text(source, name) or files.given_text(source, name, lv.starter_text())
    return Learner(path, name, fn.info["form"], given, files.functions_in(source), fn, lv.name)


def _start(path: Path, name: str, level: str = "loops") -> remote.Remote:
    try:
        return remote.start({"file": str(path), "function": name, "what": str(path), "level": level},
                            module=__name__)
    except remote.LoadFailed as e:
        raise files.LoadError(str(e)) from None


RATE_SECONDS = 30.0  # the two small timing calls of rate, together


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


def measure(learner: Learner, seqs, budget_s: float, seed: int = 0) -> tuple[list[Timing], dict, str]:
    """Time and peak memory in the learner's process (see measure.measure), one length a request, each within the
    budget and a margin: a call that hangs or sleeps ends the measurement at that length, said so; a length the
    previous one says would take over the budget is skipped with its estimate."""
    from . import measure as lab_measure

    timings: list[Timing] = []
    for T in seqs:
        if timings and (skip := lab_measure.skip_note(T, timings[-1], budget_s)) is not None:
            timings.append(skip)
            continue
        try:
            reply = learner.fn.ask("measure", seconds=budget_s + MARGIN_S, seqs=[T], budget_s=budget_s, seed=seed,
                                   level=learner.level)
        except remote.Lost:
            timings.append(Timing(T, skipped=f"no answer within {budget_s + MARGIN_S:g} s ({budget_s:g} s of "
                                             f"--max-seconds and {MARGIN_S:g} s to spare): it was stopped there"))
            break
        timings += [Timing.from_dict(t) for t in reply["timings"]]
        if timings[-1].time_s is None:  # it raised: the grading says what is wrong with it
            break
    fits, note = lab_measure.fitted(timings, budget_s)
    return timings, fits, note


def _prepare(fn, job: dict, info: dict):
    from . import grade, levels

    level = levels.find(job.get("level") or "loops")
    if level.kind == "own":  # a level with its own cases asks for its own requests (see _level)
        info["form"], info["score_mod"] = "level", False
        return fn
    form = grade.form_of(fn)  # a LoadError when it is neither form: one line, as any other load error
    info["form"] = form
    if form == "lab":
        info["score_mod"] = False
        wrapped = grade.as_sdpa(level.module().wrap(fn))
        wrapped.raw = fn  # as the learner wrote it (measured with the level's own arguments)
        return wrapped
    return fn


def _rate(fn, header: dict) -> dict:
    from . import grade

    return {"per_pair": grade.per_pair(fn)}


def _measure(fn, header: dict) -> dict:
    from . import levels, measure

    mod = levels.find(header.get("level") or "loops").module()  # (a level with cases of its own measures in _level)
    call, form = fn, "sdpa"
    if hasattr(mod, "measure_call") and hasattr(fn, "raw"):  # the level's own arguments (flash: block = 64)
        call, form = mod.measure_call(fn.raw), "lab"
    timings, fits, note = measure.measure(call, form, seqs=tuple(header["seqs"]), budget_s=header["budget_s"],
                                          seed=header["seed"])
    return {"timings": [t.to_dict() for t in timings], "fits": {k: f and f.to_dict() for k, f in fits.items()},
            "note": note}


def _level(fn, header: dict) -> dict:
    """A level's own cases, run on the learner's function or class here (see its module's ``run``)."""
    from . import levels

    return levels.find(header["level"]).module().run(fn, header)


if __name__ == "__main__":
    worker.main(prepare=_prepare, extra={"rate": _rate, "measure": _measure, "level": _level})
