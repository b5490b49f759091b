"""What ``attnlab lab check`` tells the learner: what passed, what failed and the likely cause, then the numbers.

Drawn from an :class:`attnlab.lab.result.LabResult`; nothing here is measured.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from attnlab.lab import levels
from attnlab.lab.measure import AGREE, QUADRATIC
from attnlab.measure.growth import Fit

from .fmt import fmt_bytes, fmt_time
from .plots import _plt, save_figure
from .terminal import escape

SHOWN = 8  # failing cases listed one by one; the rest are counted


def _fail_line(row) -> str:
    w = row.worst
    if w is not None and w.quantity == "loss":  # level 3's training: against the library's loss curve
        return (f"  [red]FAIL[/]  {escape(row.case)} ({row.dtype}): your loss curve is {w.err:.2e} from the "
                f"library's at its worst step, allowed {w.allowed:.2g}")
    if w is None:
        return f"  [red]{row.status.upper():<5}[/] {escape(row.case)} ({row.dtype}): {escape(row.detail)}"
    if w.err == float("inf") and row.detail:  # nothing to measure (no gradient came back): the reason, not "inf"
        return (f"  [red]FAIL[/]  {escape(row.case)} ({row.dtype}): {escape(row.detail)}; {w.quantity} is allowed "
                f"{w.allowed:.2e} from the float64 answer (PyTorch's own: {w.torch_err:.2e})")
    return (f"  [red]FAIL[/]  {escape(row.case)} ({row.dtype}): {w.quantity} is {w.err:.2e} from the float64 "
            f"answer, allowed {w.allowed:.2e} (PyTorch's own: {w.torch_err:.2e})"
            + (f"; {escape(row.detail)}" if row.detail else ""))


def fit(r, what: str) -> Fit | None:
    """The ``what`` ("time", "memory") growth of a check; a check kept before repeats were measured reads as one."""
    f = (getattr(r, "fits", None) or {}).get(what)
    p = r.exponents.get(what)
    return f if f is not None else None if p is None else Fit(p, p, p, (), 1)


def _over(f: Fit) -> str:
    return (f"T^{f.exponent:.2f}" + (f" over T = {', '.join(map(str, f.lengths))}" if f.lengths else "")
            + (", each length measured once" if f.repeats < 2 else ", the same for every repeat"
               if f"{f.low:.2f}" == f"{f.high:.2f}" else f", its repeats {f.low:.2f} to {f.high:.2f}"))


def memory_growth(r) -> tuple[bool | None, str]:
    """Whether the memory grew quadratically for every repeat (None: no fit, or the repeats straddle the rule)."""
    f = fit(r, "memory")
    if f is None:
        return None, "needs its memory at two lengths or more"
    ok, rule = f.within(2, QUADRATIC), f"rule: within {QUADRATIC} of 2 for every repeat"
    if ok is None:
        return None, (f"memory grew as {_over(f)}: the repeats straddle the rule ({rule}), so it is not decided; "
                      "check it again on a quieter machine")
    return ok, f"memory grew as {_over(f)} ({rule})"


def time_growth(r) -> str | None:
    """The time's growth, said only as far as its repeats agree; None when it was not measured at two lengths."""
    f = fit(r, "time")
    if f is None:
        return None
    if f.repeats < 2:
        return f"time {_over(f)}: its spread is not measured"
    if f.spread > AGREE:
        return (f"time: the repeats disagree (T^{f.low:.2f} to T^{f.high:.2f} over T = "
                f"{', '.join(map(str, f.lengths))}; they agree when within {AGREE}), so no growth is read from them")
    return f"time {_over(f)}"


def lines(r) -> list[str]:
    c = r.verify.counts()
    graded = len(r.verify.rows)
    out = ["[bold]Graded[/]: " + (f"[green]all {c['pass']} passed[/]" if r.passed else
           f"{c['pass']} of {graded} passed, [red]{c['fail'] + c['error']} failed[/]")
           + (f", {c['skipped']} skipped" if c["skipped"] else "") + f"  ({escape(r.cases_note)})"]
    if getattr(r, "ended", None):
        out.append(f"  [red]your function's process ended early[/]: {escape(r.ended)}; the check is not a pass")
    bad = [row for row in r.verify.rows if row.status in ("fail", "error")]
    if getattr(r, "given", False) and not r.passed:  # the starter as it came: its rows say nothing of the learner's
        bad = []
    out += [_fail_line(row) for row in bad[:SHOWN]]
    if len(bad) > SHOWN:
        out.append(f"  ... and {len(bad) - SHOWN} more failing cases (all of them in the JSON)")
    if r.shrunk:
        out.append(f"  run smaller, to finish in time: {len(r.shrunk)} cases (e.g. {escape(r.shrunk[0])})")
    if r.diagnoses:
        out.append("[bold]Likely cause[/] (most likely first):")
        out += [f"  - {escape(d.text)}" for d in r.diagnoses]
    elif not r.passed:
        out.append("[bold]Likely cause[/]: the failures fit no pattern verify knows; read the failing cases above")
    level = levels.of_result(r)
    out.append(_match_line(r, level))
    out.append(f"[bold]Measured[/] ({escape(r.measure_note)}):")
    for t in r.timings:
        mem = fmt_bytes(t.peak_bytes) if t.peak_bytes is not None else "not measured"
        load = f"   load {t.load:.1f}" if t.load is not None else ""
        out.append(f"  T = {t.seq:<5} " + (f"skipped: {escape(t.skipped)}" if t.skipped else
                                           f"{fmt_time(t.time_s):>9}   peak memory {mem}{load}"))
    grow = [f"{k} T^{v:.2f}" for k, v in r.exponents.items() if v is not None]
    if grow and level.number > 1:  # the level says what it asks of its growth (measured_note)
        out.append(f"  growth: {', '.join(grow)}" + _unsteady(r))
    else:
        ok, said = memory_growth(r)
        if fit(r, "memory") is not None:
            out.append(f"  growth: {said}" + {True: ": quadratic, doubling T quadruples it", None: "", False: ": not "
                                              "quadratic, it does not hold the whole T x T matrix at once"}[ok])
        if time_growth(r):
            out.append(f"  growth: {time_growth(r)}")
    load, cpus = busiest(r), r.machine.get("cpu_count") or 1
    if any(t.time_s is not None for t in r.timings) and load is not None and load >= cpus:
        out.append(f"  [yellow]note: the machine was busy while it was timed (load {load:.1f} on {cpus} cores): the "
                   "times are noisy, the short ones most, and so is their growth; the memory is not affected[/]")
    if getattr(r, "measured_note", ""):
        held = held_text(r)
        out.append(f"[bold]Level {level.number}[/] ({escape(level.title)}): {escape(r.measured_note)}"
                   + (f" — {held}" if held else ""))
    out.append("[bold]Next[/]: " + _next(r, level))
    return out


def busiest(r) -> float | None:
    """The highest load its lengths were timed at (a check kept before each length had its own: the one load)."""
    loads = [t.load for t in r.timings if t.time_s is not None and t.load is not None]
    return max(loads) if loads else r.machine.get("load_average")


def measured(r) -> bool:
    """Whether anything of the check's measurement was taken: a length timed, or a curve trained."""
    return any(t.time_s is not None for t in r.timings) or bool(getattr(r, "curve", None))


def held_text(r, markup: bool = True) -> str:
    """What the level asks of its measurement, said of this check: as asked, measured and it did not hold, not
    measured; and a function that fails its grading ticks nothing whatever its measurement ("" when the level asks
    nothing of it)."""
    if r.measured_ok is None:
        return ""
    failed = "the grading failed above, so the level is not done"
    if not measured(r):
        return failed if not r.passed else "so the level is not done"
    green, red = ("[green]", "[red]") if markup else ("", "")
    if r.measured_ok:
        return f"{green}as the level asks{'[/]' if markup else ''}" + ("" if r.passed else f", but {failed}")
    if getattr(r, "measured_note", "").startswith("not decided"):  # the repeats never agreed: not "did not hold"
        return "[yellow]so the level is not done yet[/]" if markup else "so the level is not done yet"
    return f"{red}measured, and it did not hold{'[/]' if markup else ''}" + ("" if r.passed else f"; {failed}")


def _match_line(r, level) -> str:
    """The match with the right answer, or, where the function gave none to compare, that it gave none."""
    own = level.kind == "own"
    against = "the right answer" if own else "F.scaled_dot_product_attention"
    where = "over the level's float32 and float64 cases" if own else "on 2 heads, T = 64, d = 32, float32"
    asks = f"the lab asks for at most {r.match_tol:g}"
    if r.match_err == float("inf"):
        return (f"[bold]Match[/]: [red]no answer to compare[/] with {against} {where}: your function raised, or "
                f"returned no tensor of the inputs' shape (the failing cases above say which); {asks}")
    ok = r.match_err <= r.match_tol
    return (f"[bold]Match[/]: max |yours - {against}| = {r.match_err:.1e} {where} ({asks}): "
            + ("[green]matches[/]" if ok else "[red]does not match[/]"))


def _unsteady(r) -> str:
    """A caveat when a measured quantity does not rise with T: a fit through such numbers says nothing."""
    said = []
    for what, attr in (("memory", "peak_bytes"), ("time", "time_s")):
        xs = [getattr(t, attr) for t in r.timings if not t.skipped and getattr(t, attr) is not None]
        if len(xs) >= 2 and any(b < a for a, b in itertools.pairwise(xs)):
            shown = ", ".join(fmt_bytes(x) if what == "memory" else fmt_time(x) for x in xs)
            said.append(f"the {what} did not rise with T ({shown}), so its exponent says nothing")
    return f" [yellow]({'; '.join(said)})[/]" if said else ""


def _next(r, level) -> str:
    """What the learner does next at a level: fix it, or the next level's starter."""
    if not r.passed:
        again = f"`attnlab lab check {r.file}`" if getattr(r, "file", "") else "the check"
        if all(d.key == "unclear" for d in r.diagnoses):  # no cause named ("no single pattern" names none)
            return f"read the failing cases above, fix what they show, and run {again} again."
        return f"fix the most likely cause and run {again} again."
    if r.measured_ok is False:  # graded right, but what the level asks of its measurement did not hold
        again = f"`attnlab lab check {r.file}`" if getattr(r, "file", "") else "the check"
        if r.measured_note.startswith("not decided"):  # nothing to change: the measurements did not decide it
            return f"the grading passed; the level's measurement is {r.measured_note} -- run {again} again."
        return (f"the grading passed, but the level is not done: {r.measured_note} -- {held_text(r, markup=False)}; "
                f"change what it measures and run {again} again.")
    after = next((lv for lv in levels.LEVELS if lv.number == level.number + 1), None)
    if after is None:
        return f"that was the last level: `attnlab lesson` shows your path through all {len(levels.LEVELS)}."
    start, check, path = levels.start_and_check(after, r.file)
    return (f"level {after.number}, {after.title}: `{start}` writes {path}, then `{check}`; "
            "`attnlab lesson` ticks this level on your path.")


def figure(r, path: str | Path) -> Path:
    """Time and peak memory against length, both axes logarithmic, with T and T² guides through the first point."""
    plt = _plt()
    from matplotlib.ticker import NullFormatter

    done = [t for t in r.timings if t.time_s is not None]
    fig, axes = plt.subplots(1, 2, figsize=(9.4, 3.8), dpi=110)
    for ax, key, label in ((axes[0], "time_s", "seconds per call"), (axes[1], "peak_bytes", "extra peak memory (MiB)")):
        pts = [(t.seq, getattr(t, key) / (2**20 if key == "peak_bytes" else 1)) for t in done if getattr(t, key)]
        if pts:
            xs, ys = zip(*pts, strict=True)
            f = fit(r, "time" if key == "time_s" else "memory")
            shown = f is not None and (key == "peak_bytes" or f.repeats < 2 or f.spread <= AGREE)
            ax.plot(xs, ys, "o-", label=f"{r.function}" + (f" (T^{f.exponent:.2f})" if shown else ""))
            x0, y0 = pts[0]
            for power, style in ((1, ":"), (2, "--")):
                ax.plot([x0, 2048], [y0, y0 * (2048 / x0) ** power], style, color="grey", lw=0.8,
                        label=f"slope {power} (∝ T{'²' if power == 2 else ''})")
        for t in r.timings:
            if t.skipped:
                ax.axvline(t.seq, color="tab:red", lw=0.6, ls=":")
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel=label)
        seqs = sorted({t.seq for t in r.timings} | {2048})
        ax.set_xticks(seqs, [str(T) for T in seqs])  # the lengths measured, labelled once each
        for axis in (ax.xaxis, ax.yaxis):  # minor ticks keep their grid lines but no labels, which would overlap
            axis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3, which="both")
        if pts:
            ax.legend(fontsize=8)
        else:  # nothing was measured: say so on the axes instead of an empty legend
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
    fig.suptitle(f"{r.function}: time and memory against length (forward, one head of width 64)", fontsize=10)
    return save_figure(fig, path)
