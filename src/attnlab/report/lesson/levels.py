"""The lab's path on the lesson page: the levels, each ticked from the learner's own newest check of that level.

For each level (:mod:`attnlab.lab.levels`) the newest check ``attnlab lab check`` kept of it
says whether it is done: it passed, it is the learner's own code (not the starter as it came) and its
measurement is what the level asks (memory like T² for the matrix form, like T for the tiled one; the
loss beside the library's for the module). The item names that check's file, function and time and how
long the check took; then every length the level names, with its time, peak memory and the machine's
load as it was timed, or why it was not timed; then charts with their axes -- time and memory against
T, memory beside the growth the level asks for, the module's loss beside the library's. The first
level not done is the next step, with the command that starts it; each level's starter is quoted
under it. Nothing here is measured.
"""

from __future__ import annotations

from html import escape

from attnlab.lab import levels, store
from attnlab.report import exercise
from attnlab.report.fmt import fmt_bytes, fmt_time

from . import charts


def _done(r) -> bool:
    return store.passed(r) and not getattr(r, "given", False) and r.measured_ok is not False


def _bytes_tick(b: float) -> str:
    return fmt_bytes(b).replace(".0 ", " ")  # 100 KiB, 1 MiB


def _log_chart(series, fmt, yname: str, label: str, unit: int = 1000) -> str:
    """Time or memory against T, both axes logarithmic, the lengths themselves the ticks of T."""
    xs = sorted({x for _, _, pts in series for x, _ in pts})
    ys = [y for _, _, pts in series for _, y in pts if y > 0]
    x = charts.Axis(xs, log=True, ticks=xs, fmt=lambda v: f"{v:g}")
    return charts.chart(series, x, charts.Axis(ys, log=True, fmt=fmt, unit=unit), "T, the sequence length (log)",
                        yname, label)


def _curves(r, lv) -> str:
    """The level's charts: the module's loss by step beside the library's; else time and memory against T."""
    if lv.name == "module" and r.curve.get("yours"):
        ys, lib = r.curve["yours"], r.curve.get("library", [])
        series = [("your module's loss", "yours", list(enumerate(ys, 1))),
                  ("the library's", "theirs", list(enumerate(lib, 1)))]
        x = charts.Axis([1, len(ys)], log=False, fmt=lambda v: f"{v:g}")
        y = charts.Axis([v for v in ys + lib], log=False, fmt=lambda v: f"{v:.2f}")
        svg = charts.chart(series, x, y, "training step", "loss", "training loss by step")
        return charts.figure(svg, f"training loss by step: {charts.legend(series)}<br><span class=\"scale\">steps "
                                  f"1–{len(ys)}; your loss {ys[0]:.3f} → {ys[-1]:.3f}</span>")
    done = [t for t in r.timings if t.time_s is not None]
    out = []
    if len(done) >= 2:
        series = [("your time a call", "yours", [(t.seq, t.time_s) for t in done])]
        out.append(charts.figure(_log_chart(series, fmt_time, "time a call (log)", "time against T"),
                                 "time a call against T, both axes logarithmic: " + charts.legend(series)))
    mem = [(t.seq, t.peak_bytes) for t in done if t.peak_bytes]
    if len(mem) >= 2:
        series = [("your extra peak memory", "yours", mem)]
        if lv.growth is not None:  # the growth the level asks for, through the first point: its limit where it
            g = lv.growth  # asks for at most T^p (a guide at T^1 under an "at most T^1.2" would ask more than it does)
            p = g.high if g.low is None and g.high is not None else g.power
            series.append((f"{g.asked()}, what the level asks", "theirs",
                           [(T, mem[0][1] * (T / mem[0][0]) ** p) for T, _ in mem]))
        out.append(charts.figure(_log_chart(series, _bytes_tick, "extra peak memory (log)", "memory against T", 1024),
                                 "extra peak memory against T, both axes logarithmic: " + charts.legend(series)))
    return f'<div class="level-charts">{"".join(out)}</div>' if out else ""


def _lengths(r, lv) -> str:
    """Every length the level names (and any other the check measured): its time, memory and load, or why not."""
    named = tuple(getattr(lv.module(), "SEQS", ()))
    have = {t.seq: t for t in r.timings}
    if not have and not named:
        return ""
    rows = []
    for T in sorted(set(named) | set(have)):
        t = have.get(T)
        if t is not None and t.time_s is not None:
            rows.append(f"<tr><td>{T}</td><td>{fmt_time(t.time_s)}</td><td>"
                        f"{fmt_bytes(t.peak_bytes) if t.peak_bytes is not None else 'not measured'}</td>"
                        f"<td>{'–' if t.load is None else f'{t.load:.1f}'}</td></tr>")
        else:
            why = t.skipped if t is not None and t.skipped else (
                "not timed: " + (r.measure_note.removeprefix("not measured: ") if not r.timings else
                                 "this check did not say why (an older attnlab kept it)"))
            rows.append(f'<tr class="skipped"><td>{T}</td><td colspan="3">{escape(why)}</td></tr>')
    return ('<table class="level-times"><thead><tr><th>T</th><th>time a call</th><th>extra peak memory</th>'
            f'<th>load</th></tr></thead><tbody>{"".join(rows)}</tbody></table>' + _conditions(r))


def _conditions(r) -> str:
    """How it was timed: the thread count and the load, against the machine's cores."""
    done = [t for t in r.timings if t.time_s is not None]
    if not done:
        return ""
    counts = sorted({t.threads for t in done if t.threads is not None})
    cpus = r.machine.get("cpu_count")
    threads = (f"on {' and '.join(map(str, counts))} torch thread{'s' if counts != [1] else ''}, in a process of "
               "its own (a small call split over threads spends its time waiting for them)" if counts else
               "on torch's own thread count (this check is older than the lab's stated one)")
    loads = [t.load for t in done if t.load is not None]
    busy = ("; the load is the machine's 1-minute load average as each length began"
            + (f", on {cpus} cores: " + ("above that, other programs' work is in these times"
                                          if max(loads) >= cpus else "below that, the machine was not full")
               if cpus else "")) if loads else ""
    return f'<p class="level-note">Timed {threads}{busy}.</p>'
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
        body = _checked(r, newest, checks) + _lengths(r, lv) + _curves(r, lv)
    starter = (f'<details class="starter"><summary>the starter of level {lv.number} ({escape(lv.filename)})'
               f'</summary><pre><code>{escape(lv.starter_text())}</code></pre></details>')
    return (f'<li class="level {"done" if ok else "todo"}" data-level="{lv.name}">{head} — {body}{starter}</li>')


def _checked(r, newest, checks) -> str:
    """Which check the item is from, when it was made and how long it took, its verdict and its measurement's."""
    t = store.when(r)
    when = f"{t:%H:%M:%S} UTC" + (f" on {t:%Y-%m-%d}" if t.date() != store.when(newest).date() else "")
    took = f" (the check took {fmt_time(r.seconds)})" if r.seconds else ""
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
    held = exercise.held_text(r, markup=False)
    return (f"from <code>{escape(r.file)}:{escape(r.function)}</code>, checked at {when}{took}: {verdict}{why}{given}"
            + (f". Measured: {escape(r.measured_note)}" if r.measured_note else "")
            + (f" — {escape(held)}" if held else ""))


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
        first, last = levels.LEVELS[0], levels.LEVELS[-1]
        nxt = (f"every level is done, all {len(levels.LEVELS)}: from {escape(first.title)} to {escape(last.title)}, "
               "by your own hand")
    elif r is not None and not getattr(r, "given", False):  # begun: the learner's file is there, to fix
        nxt = (f"level {after.number}, {escape(after.title)}: fix <code>{escape(r.file)}:{escape(r.function)}"
               f"</code> and run <code>attnlab lab check {escape(r.file)}</code> again")
    else:
        nxt = (f"level {after.number}, {escape(after.title)}: <code>attnlab lab start --level {after.name}</code>, "
               f"then <code>attnlab lab check {escape(after.filename)}</code>")
    return (f'<h3 id="lab-levels">The lab\'s path: {len(levels.LEVELS)} levels</h3><p class="levels-head">{done} of '
            f'{len(levels.LEVELS)} levels done, each from your own newest check of it (in {store.FOLDER}/). '
            f'<b>Next</b>: {nxt}.</p><ol class="levels">{items}</ol>')
