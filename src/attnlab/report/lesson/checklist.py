"""The lab's "you are done when", ticked from the learner's own newest results.

The lab asks the learner to write causal attention, match PyTorch to 1e-4, measure memory at
T = 128, 512 and 2048 and see it grow quadratically, and see what removing 1/√d does to training.
The first three are ticked only from what ``attnlab lab check`` kept for the learner's functions
(:mod:`attnlab.lab.store`), never from attnlab's forms: for each file and function its
newest check is what that function is now, and an item ticks from the newest such check that
passed and shows what the item asks (a failing function's memory is not attention's memory). The
match is never ticked from the starter's code as it came (the memory may be, and the page says
whose function it was). Each item names the check it comes from and when,
and, when that is not the learner's newest check, that check's verdict beside it. When nothing is
there, the item says what to do. Training is the lab's given, so the ablation item is the
machine's run, and it says so; it is ticked only when the run's rules say the scale's removal
destabilised it.
"""

from __future__ import annotations

import re
from html import escape

from attnlab.lab import levels, store
from attnlab.report import exercise
from attnlab.train import summary as ts

SEQS = (128, 512, 2048)
GIVEN = "the starter's code as it came"


def _code(text: str) -> str:  # `command` -> <code>command</code>
    return re.sub("`([^`]*)`", r"<code>\1</code>", escape(text, quote=False))


def _given(r) -> bool:
    return bool(getattr(r, "given", False))


def _at(r, newest) -> str:
    """When ``r`` was checked: the time of day (UTC), and the day too when it is not the newest check's."""
    t, day = store.when(r), store.when(newest).date()
    return f"{t:%H:%M:%S} UTC" + (f" on {t:%Y-%m-%d}" if t.date() != day else "")


def _name(r, newest) -> str:
    """The check, named: ``attention_lab.py:my_attention, checked at 22:47:03 UTC``."""
    return f"{r.file}:{r.function}, checked at {_at(r, newest)}" + (f" ({GIVEN}, measured by you)" if _given(r) else "")


def _verdict(r, newest) -> str:
    """The verdict of the newest check of a level, said beside an item that comes from another check of it."""
    lv = levels.of_result(r)
    return (f"Your newest check of level {lv.number} ({lv.title}): {r.file}:{r.function} at {_at(r, newest)}"
            + (f" ({GIVEN})" if _given(r) else "") + (", passed." if store.passed(r) else ", failed."))


def newest_of_level(source, history):
    """The newest check (``history``: newest first) of the level ``source`` is a check of, when it is not
    ``source`` itself: what an item ticked from ``source`` says beside it; None when ``source`` is the newest."""
    if source is None:
        return None
    lv = levels.of_result(source)
    r = next((x for x in history if levels.of_result(x) is lv), None)
    return None if r is None or r is source else r


def _measured_at(r) -> list[int]:
    return [t.seq for t in r.timings if t.peak_bytes is not None]


def _not_passed(checks) -> str:
    """Why a measurement item waits: none of the learner's functions passes now."""
    r = checks[0]
    have = _measured_at(r)
    return (f"not yet: only a passing function's measurements count, and none of yours passes now; {_name(r, r)} "
            "failed its grading" + (f" (it was measured at T = {', '.join(map(str, have))} all the same: a wrong "
                                    "function's memory is not attention's)" if have else ""))


def _match(checks) -> tuple[object | None, bool, str]:
    mine = [r for r in checks if not _given(r)]  # the starter's code as it came is not the learner's
    if not mine:
        return None, False, ("not done yet: `attnlab lab start` writes attention_lab.py; fill in its TODOs, then "
                             "`attnlab lab check attention_lab.py`" + (
                                 f"; what you checked so far is {GIVEN} ("
                                 + ", ".join(sorted({r.function for r in checks})) + "), which does not count as yours"
                                 if checks else ""))
    newest = checks[0]
    r = next((r for r in mine if store.passed(r)), None)
    if r is not None:
        return r, True, (f"from {_name(r, newest)}: every one of its {len(r.verify.rows)} graded cases passed; max "
                         f"|yours − F.sdpa| {r.match_err:.1e} (rule ≤ {r.match_tol:g})")
    r = mine[0]
    c = r.verify.counts()
    why = f"; likely cause: {r.diagnoses[0].text}" if r.diagnoses else ""
    failed = (f"{c['fail'] + c['error']} of {len(r.verify.rows)} graded cases failed{why}" if not r.passed else
              f"every one of its {len(r.verify.rows)} graded cases passed, but its output does not match")
    return r, False, (f"{_name(r, newest)}: {failed}; max |yours − F.sdpa| {r.match_err:.1e} (rule ≤ "
                      f"{r.match_tol:g}). Fix it and run `attnlab lab check {r.file}:{r.function}` again")


def _measured(checks) -> tuple[object | None, bool, str]:
    if not checks:
        return None, False, "not done yet: `attnlab lab check` measures your function at these lengths"
    newest, good = checks[0], [r for r in checks if store.passed(r)]
    if not good:
        return newest, False, _not_passed(checks)
    r = next((r for r in good if all(T in _measured_at(r) for T in SEQS)), None)
    if r is not None:
        return r, True, f"from {_name(r, newest)}: peak memory at T = {', '.join(map(str, SEQS))}"
    r = good[0]
    return r, False, (f"{_name(r, newest)}: measured at {', '.join(map(str, _measured_at(r))) or 'none of them'}"
                      + "".join(f"; T = {t.seq} {t.skipped}" for t in r.timings if t.skipped))


def _quadratic(checks, history=()) -> tuple[object | None, bool, str]:
    if not checks:
        return None, False, "not done yet: needs your function's memory at two lengths or more"
    newest, good = checks[0], [r for r in checks if store.passed(r)]
    if not good:
        return newest, False, _not_passed(checks)
    grown = [(r, *exercise.memory_growth(r)) for r in good if exercise.fit(r, "memory") is not None]
    for r, ok, said in grown:
        if ok:
            return r, True, f"from {_name(r, newest)}: {said}"
    if not grown:
        return good[0], False, f"{_name(good[0], newest)}: needs its memory at two lengths or more"
    r, ok, said = grown[0]
    if ok is None:
        return r, False, f"{_name(r, newest)}: {said}"
    matrix = next((x for x in checks if levels.of_result(x).name == "matrix"), None)
    if matrix is not None and not store.passed(matrix):  # level 2 begun, and failing now: fix that file
        before = next((x for x in history if x.file == matrix.file and x.function == matrix.function
                       and store.passed(x)), None)
        was = f"; it passed at {_at(before, newest)}" if before is not None else ""
        return r, False, (f"{_name(r, newest)}: {said}, not quadratically, as a loops version grows; your matrix form "
                          f"{_name(matrix, newest)} fails its grading now{was}: fix it and run "
                          f"`attnlab lab check {matrix.file}` again")
    if levels.of_result(r).name != "loops":
        return r, False, (f"{_name(r, newest)}: {said}, not quadratically: the matrix form holds the whole T x T "
                          f"matrix of scores at once, so its memory should grow like T²")
    start, check, path = levels.start_and_check(levels.BY_NAME["matrix"], r.file)
    return r, False, (f"{_name(r, newest)}: {said}, not quadratically. Loops that keep one row of scores at a time "
                      f"need memory like T, not T²; level 2 holds the whole T x T matrix: `{start}` writes "
                      f"{path}, then `{check}`")


def _ablation(part) -> tuple[bool, str]:
    if part.result is None or "none" not in part.result.variants:
        return False, "the machine's run: not trained yet (`attnlab train`)"
    _, preds = ts.summarise(part.result)
    where = "from " + part.note.removeprefix("from ").replace("\\", "/").rsplit("/", 1)[-1]
    if part.origin == "file" and ts.destabilised(preds):
        return True, (f"the machine's run, not yours (training is the lab's given; {where}): the unscaled softmax "
                      "stayed saturated and its loss ended above the scaled model's")
    if part.origin != "file":
        return False, f"the machine's run: only {part.origin} so far; `attnlab train` trains the real one"
    if not preds:  # no scaled run to hold the unscaled one against
        return False, f"the machine's run ({where}): not measured, it has no 1/√d run beside the unscaled one"
    failed = "; ".join(p.claim for p in preds if not p.holds)
    return False, (f"the machine's run ({where}): measured, and it did not hold at these settings — {failed}: not "
                   "so in this run (section 5 has the numbers)")


def checklist(data) -> str:
    # each file and function as it is now: its newest check; of attention in (q, k, v) only (the levels' own
    # answers -- a module, gradients, a decoder -- are not matched against F.sdpa: the path below ticks them)
    checks = store.latest([r for r in data.lab if levels.of_result(r).kind == "attention"])
    newest = checks[0] if checks else None
    # the memory items are levels 1 and 2's (loops, matrix), measured at 128 / 512 / 2048: the tiled form's memory
    # is meant to grow like T, at lengths of its own, and its level on the path below says so
    early = [r for r in checks if levels.of_result(r).name in ("loops", "matrix")]
    history = [r for r in data.lab if levels.of_result(r).name in ("loops", "matrix")]
    items = [(*_match(checks), "Your attention matches PyTorch to 1e-4"),
             (*_measured(early), "You measured its memory at T = 128, 512 and 2048"),
             (*_quadratic(early, history), "Your measurements show quadratic memory growth"),
             (None, *_ablation(data.train_scale), "Removing the 1/√d scale visibly destabilised training")]
    lis = "".join(f'<li class="{"done" if ok else "todo"}"><span class="tick">{"✓" if ok else "✗"}</span> '
                  f"<b>{escape(text)}</b> — {_code(detail)}"
                  + (f' <span class="newest">{escape(_verdict(other, newest))}</span>'
                     if (other := newest_of_level(source, data.lab)) is not None else "") + "</li>"
                  for source, ok, detail, text in items)
    done = sum(1 for _, ok, _, _ in items if ok)
    n = len(data.lab)
    source = (f"the first three from your own newest `attnlab lab check` results ({n} check{'s' if n != 1 else ''} "
              f"kept in {store.FOLDER}/), the last from the machine's training run"
              if checks else "nothing of yours checked yet; the last item is the machine's training run")
    return (f'<h3 id="lab-done">The lab: you are done when</h3><p>{done} of {len(items)} done — {_code(source)}.</p>'
            f'<ul class="checklist">{lis}</ul>')
