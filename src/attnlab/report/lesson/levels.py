"""The lab's path on the lesson page: six levels, each ticked from the learner's own newest check of that level.

For each level (:mod:`attnlab.lab.levels`) the newest check ``attnlab lab check`` kept of it
says whether it is done: it passed, it is the learner's own code (not the starter as it came) and its
measurement is what the level asks (memory like T² for the matrix form, like T for the tiled one; the
loss beside the library's for the module). The item names that check's file, function and time, says
what it measured, and draws the learner's curve -- beside the library module's loss for level 3, beside
the growth the level asks for where it is a memory. The first level not done is the next step, with
the command that starts it; each level's starter is quoted under it. Nothing here is measured.
"""

from __future__ import annotations

import math
from html import escape

from attnlab.lab import levels, store
from attnlab.report.fmt import fmt_bytes

GROWTH = {"matrix": 2.0, "flash": 1.0, "backward": 1.0, "decode": 1.0}  # the guide drawn beside a memory curve


def _done(r) -> bool:
    return store.passed(r) and not getattr(r, "given", False) and r.measured_ok is not False


def _svg(series: dict[str, list[tuple[float, float]]], label: str, logx: bool, scale: str = "") -> str:
    """A small line plot of each named series of (x, y) points (axes logarithmic for memory against T)."""
    pts = [p for s in series.values() for p in s if p[1] > 0]
    if len(pts) < 2:
        return ""
    fx = (lambda x: math.log(x)) if logx else (lambda x: x)
    fy = (lambda y: math.log(y)) if logx else (lambda y: y)
    xs, ys = [fx(x) for x, _ in pts], [fy(y) for _, y in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    w, h = 240, 90
    sx = lambda x: 8 + (fx(x) - x0) / ((x1 - x0) or 1) * (w - 16)  # noqa: E731
    sy = lambda y: h - 8 - (fy(y) - y0) / ((y1 - y0) or 1) * (h - 16)  # noqa: E731
    drawn = list(zip(("yours", "theirs"), series.values(), strict=False))[::-1]  # the learner's on top
    lines = "".join(f'<polyline class="{cls}" fill="none" points="'
                    + " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s if y > 0) + '"/>' for cls, s in drawn)
    legend = " · ".join(f'<span class="{cls}">{escape(n)}</span>' for cls, n in zip(("yours", "theirs"), series,
                                                                                    strict=False))
    return (f'<figure class="level-curve"><svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
            f'aria-label="{escape(label)}">{lines}</svg><figcaption>{escape(label)}: {legend}'
            + (f'<br><span class="scale">{escape(scale)}</span>' if scale else "") + '</figcaption></figure>')


def _curve(r, lv) -> str:
    if lv.name == "module" and r.curve.get("yours"):
        ys = r.curve["yours"]
        return _svg({"your module's loss": list(enumerate(ys, 1)),
                     "the library's": list(enumerate(r.curve.get("library", []), 1))},
                    "training loss by step", logx=False,
                    scale=f"steps 1–{len(ys)}; your loss {ys[0]:.3f} → {ys[-1]:.3f}")
    mem = [(t.seq, t.peak_bytes) for t in r.timings if t.peak_bytes]
    if len(mem) < 2:
        return ""
    series = {"your peak memory": mem}
    p = GROWTH.get(lv.name)
    if p is not None:  # the growth the level asks for, through the first point
        series[f"T^{p:g}, what the level asks"] = [(T, mem[0][1] * (T / mem[0][0]) ** p) for T, _ in mem]
    scale = (f"T = {', '.join(str(T) for T, _ in mem)}; yours "
             + " → ".join(fmt_bytes(b) for _, b in mem))  # the numbers the curve is drawn through
    return _svg(series, "extra peak memory against T (log-log)", logx=True, scale=scale)


def _passed_before(r, checks):
    """The newest earlier check of the same file and function that passed, when ``r`` (its newest) did not."""
    if r is None or store.passed(r):
        return None
    return next((x for x in checks if x is not r and x.file == r.file and x.function == r.function
                 and store.passed(x)), None)


def _item(lv, r, newest, checks=()) -> str:
    ok = r is not None and _done(r)
    head = f'<span class="tick">{"✓" if ok else "✗"}</span> <b>{escape(lv.item)}</b>'
    if r is None:
        body = (f"not checked yet: <code>attnlab lab start --level {lv.name}</code> writes {escape(lv.filename)}, "
                f"then <code>attnlab lab check {escape(lv.filename)}</code>")
    else:
        t = store.when(r)
        when = f"{t:%H:%M:%S} UTC" + (f" on {t:%Y-%m-%d}" if t.date() != store.when(newest).date() else "")
        c = r.verify.counts()
        verdict = (f"passed all {c['pass']} cases" if store.passed(r) else
                   f"failed {c['fail'] + c['error']} of {len(r.verify.rows)} cases" if not r.passed else
                   "its cases passed but its answer does not match")
        why = f"; likely cause: {escape(r.diagnoses[0].text)}" if r.diagnoses and not store.passed(r) else ""
        given = "; the starter's code as it came, which is not yours yet" if getattr(r, "given", False) else ""
        before = _passed_before(r, checks)
        if before is not None:  # it was done, and the newest check undid it
            b = store.when(before)
            verdict = (f"failing now ({verdict}); it passed at {b:%H:%M:%S} UTC"
                       + (f" on {b:%Y-%m-%d}" if b.date() != t.date() else ""))
        body = (f"from <code>{escape(r.file)}:{escape(r.function)}</code>, checked at {when}: {verdict}{why}{given}"
                + (f". Measured: {escape(r.measured_note)}" if r.measured_note else "")
                + (" (not what the level asks)" if r.measured_ok is False else "") + _curve(r, lv))
    starter = (f'<details class="starter"><summary>the starter of level {lv.number} ({escape(lv.filename)})'
               f'</summary><pre><code>{escape(lv.starter_text())}</code></pre></details>')
    return (f'<li class="level {"done" if ok else "todo"}" data-level="{lv.name}">{head} — {body}{starter}</li>')


def path(data) -> str:
    """The levels as a path, from the checks kept in the output folder (``data.lab``, newest first)."""
    checks = list(data.lab)
    newest = checks[0] if checks else None
    mine = {lv.name: next((r for r in checks if levels.of_result(r) is lv), None) for lv in levels.LEVELS}
    items = "".join(_item(lv, mine[lv.name], newest, checks) for lv in levels.LEVELS)
    done = sum(1 for lv in levels.LEVELS if mine[lv.name] is not None and _done(mine[lv.name]))
    after = next((lv for lv in levels.LEVELS if mine[lv.name] is None or not _done(mine[lv.name])), None)
    r = mine[after.name] if after is not None else None
    if after is None:
        nxt = "every level is done: from loops to FlashAttention's backward and a KV cache, by your own hand"
    elif r is not None and not getattr(r, "given", False):  # begun: the learner's file is there, to fix
        nxt = (f"level {after.number}, {escape(after.title)}: fix <code>{escape(r.file)}:{escape(r.function)}"
               f"</code> and run <code>attnlab lab check {escape(r.file)}</code> again")
    else:
        nxt = (f"level {after.number}, {escape(after.title)}: <code>attnlab lab start --level {after.name}</code>, "
               f"then <code>attnlab lab check {escape(after.filename)}</code>")
    return (f'<h3 id="lab-levels">The lab\'s path: six levels</h3><p class="levels-head">{done} of '
            f'{len(levels.LEVELS)} levels done, each from your own newest check of it (in {store.FOLDER}/). '
            f'<b>Next</b>: {nxt}.</p><ol class="levels">{items}</ol>')
