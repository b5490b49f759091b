"""``attnlab lab check``: the learner's function, graded, matched, diagnosed and measured, as one result.

The learner's file is loaded in a process of its own (:mod:`.judged`); this process, the judge's,
never imports it. Whatever the learner's code does -- ``sys.exit``, ``os._exit``, a kill, a crash, a
hang, running out of memory -- the check ends in a verdict: the case it was running is an ERROR (or,
past its time, a FAIL) row, what could not be measured says why, and the result does not pass.
"""

from __future__ import annotations

import contextlib
import time

from attnlab.judge import Diagnosis, facts
from attnlab.judge.diagnose import KINDS, diagnose
from attnlab.results.host import load_average, machine, versions

from . import files, grade, judged, levels, measure
from .levels import beside, slips
from .result import LabResult

FORMS = {"lab": "the lab's form, (q, k, v), always causal",
         "sdpa": "F.scaled_dot_product_attention's signature",
         "level": "the level's own form"}


def count(learner, quick: bool = False) -> int:
    """How many cases the check grades (for its progress bar): a level with cases of its own counts one."""
    level = levels.find(learner.level)
    if level.kind == "own":
        return 1
    mod = level.module()
    if hasattr(mod, "cases"):
        return len(mod.cases(quick))
    return len(grade.cases(learner.form, None, quick, getattr(mod, "answerable", None))[0])


# verify's lines that read no numbers: the contract, what was raised, a process that ended or hung, the oracle's own
# check. Where a level names its slip these stay beside it; its lines that read the failing numbers (a semantic it
# guessed, a tag the failing cases share: "fails only in bfloat16") speak of the same failures, and are left out.
CERTAIN = frozenset(facts.PROBLEMS) | frozenset(KINDS.values()) | {"raises"}


def level_diagnoses(probes, level, seed: int, verify_found, more=(), fill=None, fitted: list | None = None) -> list:
    """The level's slips the learner's outputs are (:mod:`.levels.slips`), first, then verify's other diagnoses --
    where a slip is named, only those of :data:`CERTAIN` the level does not say itself. The slip is read from the
    function's own outputs on the level's probes (``probes``: :func:`slips.answers`' reply), not from the failing
    rows, so this is a choice: a learner read verify's guesses and tags ("fails only in bfloat16"), beside the named
    slip, as noise about the same failures; every failing row is still in the table above the causes. ``more``:
    lines the level's own rows name (level 4's work), after the slips. ``fitted``: extended with the named slips'
    answers (:func:`slips.named`)."""
    mod = level.module()
    measured: dict[str, str] = {}
    keys = slips.named(probes, mod.PROBES, seed, mod.slip_list(), getattr(mod, "NAN", None),
                       getattr(mod, "slip_pairs", list)(), fitted, measured)
    keys += [k for k in more if not (keys and k == "lse-wrong")]  # (a named slip says what is wrong with the lse)
    text = {**getattr(mod, "TEXT", slips.TEXT), **measured}
    mine = [Diagnosis(k, text[k].format(**(fill or {}))) for k in dict.fromkeys(keys)]
    return mine + [d for d in verify_found if d.key not in set(keys) and not (mine and (d.key not in CERTAIN or
                                                                                       d.key in text))]


def slip_lines(ask, level, seed: int, verify_found, more=(), fill=None) -> list:
    """:func:`level_diagnoses`, and where it names a slip, what the learner's outputs show beside it (a second slip,
    measured: :mod:`.levels.beside`). ``ask(what)``: the learner's answers on the level's probes (``"probes"``) or on
    the cases set beside a named slip (``"beside"``)."""
    fitted: list = []
    found = level_diagnoses(ask("probes"), level, seed, verify_found, more, fill, fitted)
    if fitted:
        found += beside.second(ask("beside"), beside.cases(level.module().PROBES), seed, fitted, found)
    return found


def check(learner: judged.Learner, quick: bool = False, seed: int = 0, progress=None, on_stage=None,
          budget_s: float = measure.BUDGET_S) -> LabResult:
    """Check the loaded learner's function; ``on_stage(text)`` hears each stage (grading, measuring) as it starts.

    ``budget_s``: the most one length's measurement may take (longer ones are skipped, with their estimate).

    The judge's own work here -- the oracle, the level's lse rows, the slips' answers it compares the learner's
    with -- runs on one torch thread, as verify's grading always did (:func:`attnlab.judge.verify.one_thread`):
    its tensors are small, and split over two threads each operation waits for the other core, which the
    learner's process or another program holds. Level 4's slips (175 tiled forwards on the probes) took 6 to 11 s
    of a failing check so on a busy 2-core machine, and 0.2 to 0.7 s on one thread; the answers are the same.
    """
    from attnlab.judge.verify import one_thread

    with one_thread():
        return _check(learner, quick, seed, progress, on_stage, budget_s)


def _check(learner: judged.Learner, quick: bool, seed: int, progress, on_stage, budget_s: float) -> LabResult:
    level = levels.find(learner.level)
    if level.kind == "own":
        return level.module().check(learner, quick=quick, seed=seed, progress=progress, on_stage=on_stage,
                                    budget_s=budget_s)
    t0 = time.perf_counter()
    say = on_stage or (lambda text: None)
    name, mod = learner.name, level.module()
    form = getattr(mod, "FORM", FORMS[learner.form])
    runs = learner.fn.info.get("runs")
    say(f"found {name} in {learner.path}: {form}, level {level.number} ({level.title})" + (
        f"; it runs {runs}" if runs else "") + (
        "; it is the starter's code as it came, unchanged: what it scores is not yours" if learner.given else ""))
    own_cases = hasattr(mod, "cases")
    per_pair = None if own_cases else judged.rate(learner, min(judged.RATE_SECONDS, budget_s))  # (one that ends
    # or hangs here is started again: the cases say how)
    fn = learner.fn
    result, shrunk, note = grade.grade(fn, name, learner.form, per_pair, quick=quick, seed=seed, progress=progress,
                                       timeout=min(grade.CASE_TIMEOUT, budget_s), level=mod)
    more, fill = [], {}
    if hasattr(mod, "extra_rows") and fn.lost is None:
        rows, more, fill = _extra(learner, level, seed, budget_s)
        result.rows += rows
        if any(r.status != "pass" for r in rows):  # verify's lines read the level's own failing rows too
            result.diagnoses[name] = diagnose(result, name)
        note += f"; and {len(rows)} of the level's own: " + ", ".join(dict.fromkeys(r.case.split(",")[0] for r in rows))
    found = result.diagnoses.get(name, [])  # verify's diagnoses of the failures, most likely first
    if learner.given:
        found = [slips.starter_line(level)]
    elif not result.passed and fn.lost is None:
        found = slip_lines(lambda what: _probes(learner, seed, budget_s, what), level, seed, found, more, fill)
    hung = next((r for r in result.rows if r.facts.kind in ("timeout", "busy")), None)
    ended = fn.lost  # while it was graded (a measurement stopped for its time says so in its note instead)
    load, err, timings, fits, how = _measured(learner, mod, hung, seed, budget_s, say, result.passed)
    exps = {k: f and f.exponent for k, f in fits.items()}  # the slope alone; the fits keep the repeats' range
    r = LabResult(str(learner.path), name, learner.form, note, result, found, err,
                  result.passed and ended is None, timings, exps, how, time.perf_counter() - t0,
                  {**machine(), "load_average": load}, versions(), shrunk=shrunk, given=learner.given, ended=ended,
                  functions=list(learner.functions), level=level.name, fits=fits)
    r.measured_ok, r.measured_note = mod.measured_ok(r)
    return r


NOT_PASSED = ("not measured: it did not pass its cases, and a function that gives wrong answers is not timed (its "
              "times at large sizes would cost minutes and say nothing): fix it, and the check measures it")


def _measured(learner, mod, hung, seed: int, budget_s: float, say, passed: bool = True):
    """(the load, the match, timings, fits, how it was measured): nothing where it hung, ended or is the starter's,
    and no timings where it did not pass its cases (graded first, timed only when right: issue 54)."""
    fn = learner.fn
    load, err, timings, fits = None, float("inf"), [], {"time": None, "memory": None}
    if hung is not None:  # a function that hung once would hang the measurements too
        return load, err, timings, fits, f"not measured: it timed out on the case {hung.case!r} while it was graded"
    if fn.lost is not None:
        return load, err, timings, fits, f"not measured: {fn.lost} while it was graded"
    err = grade.match(fn, seed)
    if learner.given:  # the starter's code measures nothing of the learner's
        return load, err, timings, fits, "not measured: it is the starter's code as it came"
    if not passed:
        return load, err, timings, fits, NOT_PASSED
    seqs = mod.SEQS
    say(("measuring its time and peak memory at T = " + ", ".join(map(str, seqs))
         + f" (at most {budget_s:g} s a length; --max-seconds changes it)") if seqs else mod.measures())
    load = load_average()  # others' work while it is timed: noise in the times (not in the memory)
    clean = None
    try:
        with judged.fresh(learner) if seqs else contextlib.nullcontext(learner) as clean:  # a heap of its own
            timings, fits, how = (judged.measure(clean, seqs, budget_s, seed=seed) if seqs else
                                  mod.measured(clean, budget_s, seed))
    except judged.remote.Raised as e:
        how = f"not measured: measuring it raised {e.text}"
    except judged.remote.Lost:
        how = f"not measured: {clean.fn.lost} while it was measured"
    except files.LoadError as e:
        how = f"not measured: its process for the measurement did not start ({e})"
    return load, err, timings, fits, how


OWN_SECONDS = 120.0  # a request of the level's own (its probes, its lse cases, its work): fixed sizes, small ones


def _ask(learner, level, budget_s: float):
    """A request of the level's own to the learner's process (the probes, level 4's lse and work), given
    :data:`OWN_SECONDS` or --max-seconds, the longer."""
    seconds = max(OWN_SECONDS, budget_s) + judged.MARGIN_S
    basis = f"{OWN_SECONDS:g} s or --max-seconds, the longer, and {judged.MARGIN_S:g} s to spare"
    return lambda header: learner.fn.ask("level", seconds=seconds, basis=basis, level=level.name, **header)


def _probes(learner, seed: int, budget_s: float, what: str = "probes") -> list:
    """The learner's outputs on the level's probes (``what="beside"``: the cases :mod:`.levels.beside` sets beside a
    named slip); no outputs where it raised, ended or hung there."""
    mod = levels.find(learner.level).module()
    try:
        return _ask(learner, levels.find(learner.level), budget_s)({"what": what, "seed": seed})["probes"]
    except (judged.remote.Raised, judged.remote.Lost):
        return [None] * len(mod.PROBES if what == "probes" else beside.cases(mod.PROBES))


def _extra(learner, level, seed: int, budget_s: float) -> tuple[list, list, dict]:
    """The level's own rows (level 4: the lse cases and the work), the lines they name, the numbers those lines say.
    A request that raises or ends the process is an error row that says so."""
    from attnlab.judge import Row
    from attnlab.judge.facts import Facts, raised

    try:
        return level.module().extra_rows(_ask(learner, level, budget_s), learner.name, seed)
    except (judged.remote.Raised, judged.remote.Lost) as e:  # (what it raised is a "raises" line, as verify's is)
        facts = raised(e) if isinstance(e, judged.remote.Raised) else Facts()
        return [Row(learner.name, "the level's own cases", "float32", "error",
                    detail=judged.remote.described(e), facts=facts)], [], {}
