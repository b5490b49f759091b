"""The lab's "you are done when", ticked from the learner's own results.

The lab asks the learner to write causal attention, match PyTorch to 1e-4, measure memory at
T = 128, 512 and 2048 and see it grow quadratically, and see what removing 1/√d does to training.
The first three are ticked only from what ``attnlab lab check`` wrote for the learner's own
function (``lab-*.json`` in the output folder), never from attnlab's forms; the match never from
the starter's code as it came either (the memory may be: the learner measured it, and the page
says whose function it was). When nothing is there, the item says what to do. Training is the
lab's given, so the ablation item is the machine's run, and it says so; it is ticked only when
the run's rules say the scale's removal destabilised it.
"""

from __future__ import annotations

import re
from html import escape

from attnlab.lab.train import summary as ts

SEQS = (128, 512, 2048)
QUADRATIC = 0.25  # memory growth within this of T^2 counts as quadratic


def _code(text: str) -> str:  # `command` -> <code>command</code>
    return re.sub("`([^`]*)`", r"<code>\1</code>", escape(text, quote=False))


def _name(r) -> str:
    return f"{r.function} in {r.file}" + (" (the starter's code as it came, measured by you)" if _given(r) else "")


def _given(r) -> bool:
    return bool(getattr(r, "given", False))


def _match(results) -> tuple[bool, str]:
    mine = [r for r in results if not _given(r)]  # the starter's finished matrix version matches, and is not yours
    if not mine:
        return False, ("not done yet: `attnlab lab start` writes attention_lab.py; fill in its TODOs, then "
                       "`attnlab lab check attention_lab.py`" + (
                           "; what you checked so far is the starter's code as it came ("
                           + ", ".join(sorted({r.function for r in results})) + "), which does not count as yours"
                           if results else ""))
    results = mine
    good = [r for r in results if r.passed and r.match_err <= r.match_tol]
    if good:
        r = good[0]
        return True, (f"{_name(r)}: every one of its {len(r.verify.rows)} graded cases passed; max |yours − F.sdpa| "
                      f"{r.match_err:.1e} (rule ≤ {r.match_tol:g})")
    r = results[0]
    c = r.verify.counts()
    why = f"; likely cause: {r.diagnoses[0].text}" if r.diagnoses else ""
    return False, (f"{_name(r)}: {c['fail'] + c['error']} of {len(r.verify.rows)} graded cases failed{why}; max |yours "
                   f"− F.sdpa| {r.match_err:.1e} (rule ≤ {r.match_tol:g}). Fix it and run `attnlab lab check "
                   f"{r.file}:{r.function}` again")


def _measured(results) -> tuple[bool, str]:
    for r in results:
        have = [t.seq for t in r.timings if t.peak_bytes is not None]
        if all(T in have for T in SEQS):
            return True, f"{_name(r)}: peak memory at T = {', '.join(map(str, SEQS))}"
    if not results:
        return False, "not done yet: `attnlab lab check` measures your function at these lengths"
    r = results[0]
    have = [t.seq for t in r.timings if t.peak_bytes is not None]
    return False, (f"{_name(r)}: measured at {', '.join(map(str, have)) or 'none of them'}"
                   + "".join(f"; T = {t.seq} {t.skipped}" for t in r.timings if t.skipped))


def _quadratic(results) -> tuple[bool, str]:
    grown = [(r, r.exponents.get("memory")) for r in results if r.exponents.get("memory") is not None]
    for r, p in grown:
        if abs(p - 2) <= QUADRATIC:
            return True, f"{_name(r)}: memory grew as T^{p:.2f} (rule: within {QUADRATIC} of 2)"
    if not grown:
        return False, "not done yet: needs your function's memory at two lengths or more"
    r, p = grown[0]
    return False, (f"{_name(r)}: memory grew as T^{p:.2f}, not quadratically (rule: within {QUADRATIC} of 2). Loops "
                   "that keep one row of scores at a time need memory like T, not T²: check the matrix version too "
                   f"(`attnlab lab check {r.file}:attention_matrix`)")


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
    failed = "; ".join(p.claim for p in preds if not p.holds)
    return False, (f"the machine's run ({where}): not measured at these settings — {failed or 'no prediction'} did "
                   "not hold (section 5 has the numbers)")


def checklist(data) -> str:
    mine = list(data.lab)
    items = [(*_match(mine), "Your attention matches PyTorch to 1e-4"),
             (*_measured(mine), "You measured its memory at T = 128, 512 and 2048"),
             (*_quadratic(mine), "Your measurements show quadratic memory growth"),
             (*_ablation(data.train_scale), "Removing the 1/√d scale visibly destabilised training")]
    lis = "".join(f'<li class="{"done" if ok else "todo"}"><span class="tick">{"✓" if ok else "✗"}</span> '
                  f"<b>{escape(text)}</b> — {_code(detail)}</li>" for ok, detail, text in items)
    done = sum(1 for ok, _, _ in items if ok)
    source = ("the first three from your own `attnlab lab check` results, the last from the machine's training run"
              if mine else "nothing of yours checked yet; the last item is the machine's training run")
    return (f'<h3 id="lab-done">The lab: you are done when</h3><p>{done} of {len(items)} done — {_code(source)}.</p>'
            f'<ul class="checklist">{lis}</ul>')
