"""The benchmark's table, growth lines, CSV and figure, drawn from a BenchResult (nothing is measured here).

The figure has two log-log panels, time and extra peak memory against the sequence length, one
line per form. On log-log axes a cost that grows like T^p is a straight line of slope p; the
dashed grey lines of slope 1 and 2 are there to hold each form's line against.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from rich.table import Table

from attnlab.lab.bench import BenchResult

from .fmt import fmt_memory, fmt_time
from .plots import _plt, save

COLUMNS = ["impl", "seq", "time_s", "time_min_s", "time_max_s", "gflops", "peak_bytes", "skipped"]
QUADRATIC = (1.7, 2.3)  # a fitted memory slope in this range reads as "grows with the square of T"


def table(result: BenchResult) -> Table:
    """One row per (form, length): median time and spread, rate, share of the matmul peak, extra peak memory."""
    c = result.config
    shape = f"B={c['batch']} H={c['heads']} d={c['head_dim']} {c['dtype']} on {c['device']}"
    what = ("forward + backward" if c["backward"] else "forward") + (", causal" if c["causal"] else "") + \
        (f", mask {c['mask']}" if c["mask"] else "") + (f", score_mod {c['mod']}" if c.get("mod") else "")
    t = Table(title=f"attnlab bench: {what}, {shape}")
    for col in ("form", "T", "time (median)", "min - max", "GFLOP/s", "of matmul peak", "extra peak memory"):
        t.add_column(col, justify="left" if col == "form" else "right")
    floor = result.machine.get("memory_noise_floor_bytes")
    for r in result.results:
        if r.skipped is not None:
            t.add_row(r.impl, str(r.seq), f"[yellow]{status(r)}[/]", "", "", "", "")
            continue
        share = f"{r.gflops / result.matmul_gflops:.0%}" if r.gflops and result.matmul_gflops else "-"
        t.add_row(r.impl, str(r.seq), fmt_time(r.time_s), f"{fmt_time(r.time_min_s)} - {fmt_time(r.time_max_s)}",
                  f"{r.gflops:.3g}" if r.gflops is not None else "-", share, fmt_memory(r.peak_bytes, floor))
    return t


def status(row) -> str:
    """One word for a row that was not measured: skipped, failed, unavailable or interrupted."""
    reason = row.skipped or ""
    if reason == "interrupted":
        return "interrupted"
    if reason.startswith(("failed", "not tried")):
        return "failed"
    return "unavailable" if reason.startswith("unavailable") else "skipped"


def skip_lines(result: BenchResult) -> list[str]:
    """Why each case was not measured (the interrupted ones are summed up by the caller)."""
    return [f"{status(r)} {r.impl} T={r.seq}: {r.skipped}" for r in result.results
            if r.skipped is not None and r.skipped != "interrupted"]


def growth_lines(result: BenchResult) -> list[str]:
    """Per form: the fitted exponents of time and memory against T."""
    def p(x):
        return "-" if x is None else f"T^{x:.2f}"

    def over(name, what):
        seqs = result.fit_lengths.get(name, {}).get(what) or []
        return f"(T = {', '.join(map(str, seqs))})" if result.exponents[name][what] is not None else ""

    lines = []
    for name, e in result.exponents.items():
        lines.append(f"{name:<8} time {p(e['time']):<8} {over(name, 'time'):<18} memory {p(e['memory']):<8} "
                     f"{over(name, 'memory')}".rstrip())
    return lines


def checklist_line(result: BenchResult, form: str = "matrix") -> str:
    """The lesson's checklist line, with the matrix form's fitted memory exponent."""
    e = result.exponents.get(form, {}).get("memory")
    seqs = result.fit_lengths.get(form, {}).get("memory") or [r.seq for r in result.rows(form) if r.skipped is None]
    if e is None:
        return f"[ ] quadratic memory growth measured: the {form} form's memory was not measured above the " \
               f"noise floor at two lengths"
    ok = QUADRATIC[0] <= e <= QUADRATIC[1]
    return f"[{'x' if ok else ' '}] quadratic memory growth measured: {form} peak memory grows as T^{e:.2f} " \
           f"(least squares over T = {', '.join(map(str, seqs))})"


def write_csv(result: BenchResult, path: str | Path) -> Path:
    """One line per (form, length), the same fields as the results of bench.json."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in result.results:
            w.writerow({k: "" if getattr(r, k) is None else getattr(r, k) for k in COLUMNS})
    return path


def figure(result: BenchResult, path: str | Path) -> Path:
    """bench.png: time and extra peak memory against T, log-log, one line per form, reference slopes 1 and 2."""
    plt = _plt()
    floor = result.machine.get("memory_noise_floor_bytes")
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=120)
    seqs = sorted({r.seq for r in result.results})
    for name, e in result.exponents.items():
        rows = [r for r in result.rows(name) if r.skipped is None]
        if not rows:
            continue
        x = [r.seq for r in rows]
        y = [r.time_s for r in rows]
        err = [[r.time_s - r.time_min_s for r in rows], [r.time_max_s - r.time_s for r in rows]]
        slope = "" if e["time"] is None else f" (T^{e['time']:.2f})"
        line = ax_t.errorbar(x, y, yerr=err, marker="o", capsize=3, label=name + slope)[0]
        mem = [r for r in rows if r.peak_bytes is not None and (floor is None or r.peak_bytes >= floor)]
        if mem:
            slope = "" if e["memory"] is None else f" (T^{e['memory']:.2f})"
            ax_m.plot([r.seq for r in mem], [r.peak_bytes / 2**20 for r in mem], marker="o",
                      color=line.get_color(), label=name + slope)
    if floor:
        ax_m.axhline(floor / 2**20, color="grey", ls=":", lw=1, label="noise floor")
    for ax, ylabel, title in ((ax_t, "seconds per call (median, min-max)", "Time"),
                              (ax_m, "extra peak memory (MiB)", "Peak memory over the inputs")):
        _reference_slopes(ax, seqs)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if seqs:
            ax.set_xticks(seqs, [str(s) for s in seqs])
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def _reference_slopes(ax, seqs: list[int]) -> None:
    """Dashed lines of slope 1 and 2 through the centre (geometric means) of the data on the axes."""
    ys = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
    if len(seqs) < 2 or not ys:
        return
    xm = math.exp(sum(math.log(x) for x in seqs) / len(seqs))
    ym = math.exp(sum(math.log(y) for y in ys) / len(ys))
    for p, style in ((1, "--"), (2, "-.")):
        ax.plot(seqs, [ym * (x / xm) ** p for x in seqs], color="grey", ls=style, lw=1,
                label=f"slope {p} (∝ T{'²' if p == 2 else ''})")
