"""``attnlab lab check``: the learner's function, graded, matched, diagnosed and measured, as one result."""

from __future__ import annotations

import time

from attnlab.lab.machine import load_average, machine, versions

from . import files, grade, measure
from .result import LabResult

FORMS = {"lab": "the lab's form, (q, k, v), always causal",
         "sdpa": "F.scaled_dot_product_attention's signature"}


def check(spec: str, quick: bool = False, seed: int = 0, progress=None, on_stage=None) -> LabResult:
    """Load ``FILE[:FUNCTION]`` and check it; ``on_stage(text)`` hears each stage (grading, measuring) as it starts."""
    t0 = time.perf_counter()
    say = on_stage or (lambda text: None)
    path, name, fn = files.load(spec)
    form = grade.form_of(fn)
    starters = files.given(fn)
    say(f"found {name} in {path}: {FORMS[form]}" + ("; it is the starter's code as it came, unchanged: what it "
                                                    "scores is not yours" if starters else ""))
    result, shrunk, note = grade.grade(fn, name, form, quick=quick, seed=seed, progress=progress)
    found = result.diagnoses.get(name, [])  # verify's diagnoses of the failures, most likely first
    hung = next((r for r in result.rows if r.detail.startswith("timed out")), None)
    load = None
    if hung is not None:  # a function that hung once would hang the measurements too
        err, timings, exps = float("inf"), [], {"time": None, "memory": None}
        how = f"not measured: it timed out on the case {hung.case!r} while it was graded"
    else:
        err = grade.match(fn, form, seed)
        say("measuring its time and peak memory at T = " + ", ".join(map(str, measure.SEQS)))
        load = load_average()  # others' work while it is timed: noise in the times (not in the memory)
        timings, exps, how = measure.measure(fn, form, seed=seed)
    return LabResult(str(path), name, form, note, result, found, err, result.passed, timings, exps, how,
                     time.perf_counter() - t0, {**machine(), "load_average": load}, versions(), shrunk=shrunk,
                     given=starters)
