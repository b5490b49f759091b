"""Tables and progress on the terminal (rich; plain text on a core install without it, see plain.py)."""

from __future__ import annotations

import re
import sys
import time
from contextlib import contextmanager

try:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table
except ModuleNotFoundError:  # the core install (no 'lab' extra): verify's table as plain text, no progress bar
    from .plain import Console, Table, escape

    Progress = None

from .fmt import fmt_err

console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 150)
HEARTBEAT_S = 10.0  # in a log, a step that goes on says how far it is at most this often


@contextmanager
def status(text: str):
    """What a long job is doing now; yields update(text).

    On a terminal: one line that changes in place, with a spinner. In a log or a pipe: a line when the
    job moves on to another step (the text changes in more than its numbers), and while one step goes
    on, a line at most every HEARTBEAT_S -- each step is in the log, without a line per update.
    """
    if getattr(console, "is_terminal", False):
        with console.status(text) as s:
            yield s.update
        return
    last = {"step": None, "at": 0.0}

    def update(now_doing: str) -> None:
        step, now = re.sub(r"\d[\d,.]*", "#", now_doing), time.monotonic()
        if step != last["step"] or now - last["at"] >= HEARTBEAT_S:
            last.update(step=step, at=now)
            console.print(escape(now_doing))

    update(text)
    yield update


@contextmanager
def progress(total: int, what: str):
    """A progress bar with a rate; yields a function advance(description)."""
    if Progress is None:
        yield lambda desc="": None
        return
    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn()]
    with Progress(*cols, console=console, transient=True) as p:
        task = p.add_task(what, total=total, rate="")
        state = {"n": 0}

        def advance(desc: str = ""):
            state["n"] += 1
            t = p.tasks[0]
            rate = f"{state['n'] / t.elapsed:.1f} {what}/s" if t.elapsed else ""
            p.update(task, advance=1, description=desc or what, rate=rate)

        yield advance


SHOWS = ("judged", "all", "failures")  # verify --show: judged rows one by one and the skipped ones counted, every
# row one by one, or the failing rows alone


def _failing(r, worst) -> list:
    """A failing row's failing quantities besides its worst, furthest past their limits first."""
    if r.status != "fail":
        return []
    others = [c for c in r.comparisons if not c.passed and c is not worst]
    return sorted(others, key=lambda c: -(c.err / c.allowed if c.allowed > 0 else float("inf")))


def verify_table(result, show: str = "judged", table=None) -> Table:
    """One row per (form, case): worst quantity, its error, PyTorch's error, the limit, the verdict.
    ``show`` one of :data:`SHOWS`: under "judged" the skipped cases are one row per form and reason, with their
    count and one of them. ``table``: the table class (default rich's, or the plain one on a core install)."""
    if show not in SHOWS:
        raise ValueError(f"show={show!r}: choose from {', '.join(map(repr, SHOWS))}")
    t = (table or Table)(title="attnlab verify: max error against the float64 oracle (limit = 2 x PyTorch's + "
                               "rounding floor)")
    for col in ("form", "case", "dtype", "worst", "error", "PyTorch's error", "limit", "result"):
        t.add_column(col, justify="right" if col in ("error", "PyTorch's error", "limit") else "left",
                     overflow="fold", min_width=24 if col == "result" else None)  # long reasons wrap, never cut
    skipped: dict[tuple[str, str], list] = {}
    for r in result.rows:
        if show == "failures" and r.status in ("pass", "skipped"):
            continue
        if show == "judged" and r.status == "skipped":
            skipped.setdefault((r.form, r.detail), []).append(r)
            continue
        w = r.worst
        style = {"pass": "green", "fail": "red", "error": "red", "skipped": "yellow"}[r.status]
        if w is None:
            t.add_row(r.form, r.case, r.dtype, "-", "-", "-", "-", f"[{style}]{r.status.upper()}[/] {escape(r.detail)}")
        else:
            t.add_row(r.form, r.case, r.dtype, w.quantity, fmt_err(w.err), fmt_err(w.torch_err), fmt_err(w.allowed),
                      f"[{style}]{r.status.upper()}[/]")
            for c in _failing(r, w):  # every other quantity that fails, a line each under the worst
                t.add_row("", "", "", c.quantity, fmt_err(c.err), fmt_err(c.torch_err), fmt_err(c.allowed),
                          "[red]FAIL[/]")
    for (form, why), rows in skipped.items():
        dtypes = sorted({r.dtype for r in rows})
        t.add_row(form, f"{len(rows)} case(s), e.g. {rows[0].case}", ", ".join(dtypes), "-", "-", "-", "-",
                  f"[yellow]SKIPPED[/] {escape(why)}" + (" (--show all lists them)" if len(rows) > 1 else ""))
    return t


def verify_summary(result, forms: list[str], dropout_skipped: bool = False) -> str:
    """The verdict under the table: ALL PASS or FAILURES, the counts, and what the rule was if not the usual."""
    c = result.counts()
    verdict = "[green]ALL PASS[/]" if result.passed else "[red]FAILURES[/]"
    vacuous = result.vacuous() if hasattr(result, "vacuous") else []
    if vacuous and c["fail"] == c["error"] == 0:
        verdict = "[red]JUDGED NOTHING[/]"
    held = []
    if getattr(result, "factor", 2.0) != 2.0:
        held.append(f"the rule's factor set to {result.factor:g}x PyTorch's error, not the default 2x")
    if not getattr(result, "backward", True):
        held.append("the output only, no gradient (forward only)")
    if dropout_skipped:
        held.append("dropout not checked: --no-dropout")
    line = (f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skipped']} skipped, over "
            f"{len(forms)} form(s): {', '.join(forms)}" + (f" ({'; '.join(held)})" if held else ""))
    if vacuous:
        n = sum(len(r.comparisons) for r in result.rows)
        line += (f"\nthe factor {result.factor:g} judges nothing on {len(vacuous)} of {n} quantities: their limit "
                 f"exceeds the answer's own size, so an output of zeros would pass them; at most "
                 f"{result.judging_factor():.3g} judges every quantity of these cases")
    return line


def untested_lines(result) -> list[str]:
    """What was not tested, one line per reason with its count and dtypes (a refusal by attnlab.Unsupported says
    its own message); and, where a function refused by NotImplementedError, how to say it as a refusal."""
    groups: dict[tuple[str, str], list] = {}
    for r in result.rows:
        if r.status == "skipped":
            groups.setdefault((r.form, r.detail.splitlines()[0] if r.detail else "skipped"), []).append(r)
    lines = ["not tested:"] if groups else []
    for (form, why), rows in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        dtypes = ", ".join(dict.fromkeys(r.dtype for r in rows))
        lines.append(f"  - {escape(form)}: {len(rows)} case(s) in {dtypes}, e.g. {escape(rows[0].case)!r}: "
                     f"{escape(why[:160])}")
    if any(r.status == "error" and r.facts.raised_type == "NotImplementedError" for r in result.rows):
        lines.append("to refuse an argument you do not support, raise attnlab.Unsupported: the case is then skipped "
                     "with your message, not an error")
    return lines


def diagnosis_lines(result) -> list[str]:
    """Under the table, for each form that failed: what its failures point to, one line each, and under a line the
    smallest case that still fails that way and its reproducer (``result.repros``, where verify shrank them)."""
    lines = []
    for form, found in result.diagnoses.items():
        if found:
            lines.append(f"[bold]{escape(form)}[/]: what the failures point to")
            repros = getattr(result, "repros", {}).get(form, [])
            for d in found:
                lines.append(f"  - {escape(d.text)}")
                lines += [f"      {escape(m)}" for m in getattr(d, "measured", [])]
                lines += [f"    {escape(r.line())}" for r in repros if r.of(d)][:1]
    return lines


def ratio_lines(result) -> list[str]:
    """Each function's error as a multiple of PyTorch's on the same cases, per dtype: the median over its cases and
    the worst (with its quantity and case) -- what the rule's 2x plus a rounding floor allowed, said in numbers."""
    lines = []
    forms = list(dict.fromkeys(r.form for r in result.rows))
    for form in forms:
        per = result.ratios(form) if hasattr(result, "ratios") else {}
        if not per:
            continue
        said = "; ".join(f"{dt} {v['median']:.2g}x median, {v['worst']:.3g}x worst ({v['quantity']}, "
                         f"{escape(v['case'])})" for dt, v in per.items())
        who = f"{escape(form)}'s" if len(forms) > 1 else "the"
        lines.append(f"{who} error as a multiple of PyTorch's on the same cases: {said}")
    return lines


def oracle_line(result) -> str | None:
    """The oracle's own check: the largest float64 disagreement with PyTorch over the cases, against its limit."""
    w = result.worst_cross()
    if w is None:
        return None
    return (f"oracle check: PyTorch in float64 agrees with the float64 oracle on every case (worst {w.err:.1e} on "
            f"{w.quantity}, limit {w.allowed:.1e})" if all(r.cross is None or r.cross.passed for r in result.rows)
            else f"[red]oracle check failed[/]: PyTorch in float64 and the oracle disagree (worst {w.err:.1e} on "
                 f"{w.quantity}, limit {w.allowed:.1e}); those cases judge nothing")
