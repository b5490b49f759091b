"""``attnlab lab check``: the learner's function, graded, matched, diagnosed and measured, as one result.

The learner's file is loaded in a process of its own (:mod:`.judged`); this process, the judge's,
never imports it. Whatever the learner's code does -- ``sys.exit``, ``os._exit``, a kill, a crash, a
hang, running out of memory -- the check ends in a verdict: the case it was running is an ERROR (or,
past its time, a FAIL) row, what could not be measured says why, and the result does not pass.
"""

from __future__ import annotations

import time

from attnlab.results.host import load_average, machine, versions

from . import grade, judged, levels, measure
from .levels import slips
from .result import LabResult

FORMS = {"lab": "the lab's form, (q, k, v), always causal",
         "sdpa": "F.scaled_dot_product_attention's signature",
         "level": "the level's own form"}


def level_diagnoses(target, level, seed: int, verify_found) -> list:
    """The level's slips the learner's outputs are (:mod:`.levels.slips`), first, then verify's other diagnoses --
    but not its "no single pattern" line where a slip is named. The slip is read from the function's own outputs on
    the level's probes, not from the failing rows, so this is a choice: a learner read that line, beside the named
    slip, as noise about the same failures; every failing row is still in the table above the causes."""
    mod = level.module()
    keys = slips.named(slips.outputs(target, seed), mod.slip_list())
    mine = slips.diagnoses(keys, getattr(mod, "TEXT", slips.TEXT))
    return mine + [d for d in verify_found if d.key not in set(keys) and not (mine and d.key == "unclear")]


def check(learner: judged.Learner, quick: bool = False, seed: int = 0, progress=None, on_stage=None,
          budget_s: float = measure.BUDGET_S) -> LabResult:
    """Check the loaded learner's function; ``on_stage(text)`` hears each stage (grading, measuring) as it starts.

    ``budget_s``: the most one length's measurement may take (longer ones are skipped, with their estimate).
    """
    level = levels.find(learner.level)
    if level.kind == "own":
        return level.module().check(learner, quick=quick, seed=seed, progress=progress, on_stage=on_stage,
                                    budget_s=budget_s)
    t0 = time.perf_counter()
    say = on_stage or (lambda text: None)
    name = learner.name
    say(f"found {name} in {learner.path}: {FORMS[learner.form]}, level {level.number} ({level.title})" + (
        "; it is the starter's code as it came, unchanged: what it scores is not yours" if learner.given else ""))
    per_pair = judged.rate(learner, min(judged.RATE_SECONDS, budget_s))  # (one that ends or hangs here is started
    # again: the cases say how)
    fn = learner.fn
    result, shrunk, note = grade.grade(fn, name, learner.form, per_pair, quick=quick, seed=seed, progress=progress,
                                       timeout=min(grade.CASE_TIMEOUT, budget_s))
    found = result.diagnoses.get(name, [])  # verify's diagnoses of the failures, most likely first
    if not result.passed and fn.lost is None:
        found = level_diagnoses(fn, level, seed, found)
    hung = next((r for r in result.rows if r.facts.kind == "timeout"), None)
    ended = fn.lost  # while it was graded (a measurement stopped for its time says so in its note instead)
    load, err, timings, fits = None, float("inf"), [], {"time": None, "memory": None}
    if hung is not None:  # a function that hung once would hang the measurements too
        how = f"not measured: it timed out on the case {hung.case!r} while it was graded"
    elif fn.lost is not None:
        how = f"not measured: {fn.lost} while it was graded"
    else:
        err = grade.match(fn, seed)
        seqs = level.module().SEQS
        say("measuring its time and peak memory at T = " + ", ".join(map(str, seqs))
            + f" (at most {budget_s:g} s a length; --max-seconds changes it)")
        load = load_average()  # others' work while it is timed: noise in the times (not in the memory)
        try:
            timings, fits, how = judged.measure(learner, seqs, budget_s, seed=seed)
        except judged.remote.Raised as e:
            how = f"not measured: measuring it raised {e.text}"
        except judged.remote.Lost:
            how = f"not measured: {fn.lost} while it was measured"
    exps = {k: f and f.exponent for k, f in fits.items()}  # the slope alone; the fits keep the repeats' range
    r = LabResult(str(learner.path), name, learner.form, note, result, found, err,
                  result.passed and ended is None, timings, exps, how, time.perf_counter() - t0,
                  {**machine(), "load_average": load}, versions(), shrunk=shrunk, given=learner.given, ended=ended,
                  functions=list(learner.functions), level=level.name, fits=fits)
    r.measured_ok, r.measured_note = level.module().measured_ok(r)
    return r
