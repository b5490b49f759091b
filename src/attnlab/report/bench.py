"""The benchmark's table, growth lines, CSV and figure, drawn from a BenchResult (nothing is measured here).

The figure has two log-log panels, time and extra peak memory against the sequence length, one
line per form. On log-log axes a cost that grows like T^p is a straight line of slope p; the
dashed grey lines of slope 1 and 2 are there to hold each form's line against.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from attnlab._extras import require
from attnlab.measure.bench import BenchResult

from .fmt import fmt_bytes, fmt_memory, fmt_time
from .plots import _plt, save_figure

Table = require("rich.table").Table
escape = require("rich.markup").escape

COLUMNS = ["impl", "seq", "time_s", "time_min_s", "time_max_s", "gflops", "peak_bytes", "skipped", "status"]
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
            t.add_row(r.impl, str(r.seq), f"[yellow]{r.status}[/]", "", "", "", "")
            continue
        share = f"{r.gflops / result.matmul_gflops:.0%}" if r.gflops and result.matmul_gflops else "-"
        t.add_row(r.impl, str(r.seq), fmt_time(r.time_s), f"{fmt_time(r.time_min_s)} - {fmt_time(r.time_max_s)}",
                  f"{r.gflops:.3g}" if r.gflops is not None else "-", share, fmt_memory(r.peak_bytes, floor))
    return t


def skip_lines(result: BenchResult) -> list[str]:
    """Why each case was not measured (the interrupted ones are summed up by the caller)."""
    return [f"{r.status} {r.impl} T={r.seq}: {r.skipped}" for r in result.results
            if r.skipped is not None and r.status != "interrupted"]


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


def machine_lines(result: BenchResult) -> list[str]:
    """What the numbers stand against: a busy-machine warning, the matmul peak, how peak memory was read."""
    m, cfg = result.machine, result.config
    lines = []
    load, cpus = m.get("load_average"), m.get("cpu_count") or 1
    if load is not None and load >= cpus:
        lines.append(f"[yellow]note: the machine was busy when this started (load {load:.1f} on {cpus} cores): "
                     f"times are noisy, the short ones most; fewer --threads (e.g. 1) steadies them[/]")
    half_on_cpu = cfg["device"] == "cpu" and cfg["dtype"] in ("bfloat16", "float16")
    kind = f"best of {cfg['dtype']} and float32" if half_on_cpu else cfg["dtype"]
    threads = f"{m['torch_threads']} thread" + ("" if m["torch_threads"] == 1 else "s")
    sizes = ", ".join(f"{n} x {n}" for n in (m.get("matmul_sizes") or {}).values())
    lines.append(f"matmul peak: {result.matmul_gflops:.1f} GFLOP/s ({kind}, {sizes}, {threads}, "
                 f"{escape(str(m['cpu'] if cfg['device'] == 'cpu' else m['cuda']))})")
    floor = m.get("memory_noise_floor_bytes")
    lines.append(f"peak memory: {m.get('memory_method') or 'not measurable on this platform'}"
                 + (f"; noise floor {fmt_bytes(floor)}" if floor else ""))
    return lines


def show(result: BenchResult, console) -> None:
    """Everything `attnlab bench` prints after the sweep: the table, skips, the machine, growth, the checklist."""
    console.print(table(result))
    for line in skip_lines(result):
        console.print(f"  [yellow]{escape(line)}[/]")
    for line in machine_lines(result):
        console.print(line)
    console.print("growth with T (least-squares slope of log cost against log T, over the longer half of the lengths, "
                  "where the part that grows with T dominates):")
    for line in growth_lines(result):
        console.print(f"  {escape(line)}")
    console.print(escape(checklist_line(result)))


def write_csv(result: BenchResult, path: str | Path) -> Path:
    """One line per (form, length), the same fields as the results of bench.json."""
    import io

    from attnlab.results.files import write_text

    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=COLUMNS)
    w.writeheader()
    for r in result.results:
        w.writerow({k: "" if getattr(r, k) is None else getattr(r, k) for k in COLUMNS})
    return write_text(path, table.getvalue())


def figure(result: BenchResult, path: str | Path, *, size: tuple[float, float] = (11, 4.4), dpi: int = 120) -> Path:
    """bench.png: time and extra peak memory against T, log-log, one line per form, reference slopes 1 and 2.

    The memory panel is left out when no memory was measured (a run that timed only)."""
    plt = _plt()
    floor = result.machine.get("memory_noise_floor_bytes")
    has_mem = any(r.peak_bytes is not None for r in result.results if r.skipped is None)
    fig, axes = plt.subplots(1, 2 if has_mem else 1, figsize=size, dpi=dpi, squeeze=False)
    ax_t, ax_m = axes[0][0], axes[0][1] if has_mem else None
    for name in dict.fromkeys(r.impl for r in result.results):
        rows = [r for r in result.rows(name) if r.skipped is None and r.time_s is not None]
        if rows:
            _form_lines(ax_t, ax_m, name, rows, result.exponents.get(name, {}), floor)
    if floor and ax_m is not None:
        ax_m.axhline(floor / 2**20, color="grey", ls=":", lw=1, label="noise floor")
    panels = [(ax_t, "seconds per call (median, min-max)", "Time")]
    if ax_m is not None:
        panels.append((ax_m, "extra peak memory (MiB)", "Peak memory over the inputs"))
    seqs = sorted({r.seq for r in result.results})
    for ax, ylabel, title in panels:
        _reference_slopes(ax, seqs)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if seqs:
            ax.set_xticks(seqs, [str(s) for s in seqs])
        ax.set(xlabel="sequence length T", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return save_figure(fig, path)


def _form_lines(ax_t, ax_m, name: str, rows, e: dict, floor: int | None) -> None:
    """One form's time (with its min-max spread) and, above the noise floor, its memory; the fitted slopes in the
    labels."""
    def label(what):
        return name if e.get(what) is None else f"{name} (T^{e[what]:.2f})"

    x = [r.seq for r in rows]
    spread = None
    if all(r.time_min_s is not None and r.time_max_s is not None for r in rows):
        spread = [[r.time_s - r.time_min_s for r in rows], [r.time_max_s - r.time_s for r in rows]]
    line = ax_t.errorbar(x, [r.time_s for r in rows], yerr=spread, marker="o", capsize=3, label=label("time"))[0]
    mem = [r for r in rows if r.peak_bytes is not None and (floor is None or r.peak_bytes >= floor)]
    if ax_m is not None and mem:
        ax_m.plot([r.seq for r in mem], [r.peak_bytes / 2**20 for r in mem], marker="o", color=line.get_color(),
                  label=label("memory"))


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
