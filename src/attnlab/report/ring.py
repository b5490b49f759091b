"""The ring attention experiment on the terminal: errors, per-rank time and memory, work per rank."""

from __future__ import annotations

from attnlab._extras import require

from .fmt import fmt_count, fmt_err, fmt_mib

Table = require("rich.table").Table


def headline(r) -> str:
    c = r.config
    kv = f"{c['heads']}/{c['kv_heads']} (GQA)" if c["kv_heads"] not in (None, c["heads"]) else str(c["heads"])
    return (f"attnlab ring: {c['world']} ranks ({r.backend}), T={c['seq']} ({c['seq'] // c['world']} per rank), "
            f"B={c['batch']}, H={kv}, d={c['head_dim']}, {'causal' if c['causal'] else 'not causal'}, "
            f"{c['layout']} layout, {'forward + backward' if c['backward'] else 'forward'}, {c['dtype']}")


def errors_table(r) -> Table:
    t = Table(title="max error against the float64 oracle (limit = 2 x PyTorch's + floor), output gathered "
                    "from every rank")
    for col in ("layout", "quantity", "ring", "PyTorch's", "limit", "result"):
        t.add_column(col, justify="left" if col in ("layout", "quantity", "result") else "right")
    for x in r.layouts:
        for c in x.comparisons:
            t.add_row(x.layout, c.quantity, fmt_err(c.err), fmt_err(c.torch_err), fmt_err(c.allowed),
                      "[green]PASS[/]" if c.passed else "[red]FAIL[/]")
    return t


def ranks_table(r) -> Table:
    t = Table(title=f"one step per rank ({r.config['layout']}, {r.config['threads']} thread each; median of "
                    f"{r.config['repeats']}), peak memory with the rank's inputs")
    for col in ("rank", "time", "min-max", "in tiles", "waiting", "peak memory"):
        t.add_column(col, justify="right")
    for x in r.ranks:
        t.add_row(str(x.rank), f"{x.time_s * 1e3:.1f} ms", f"{x.time_min_s * 1e3:.1f}-{x.time_max_s * 1e3:.1f}",
                  f"{x.compute_s * 1e3:.1f} ms", f"{x.wait_s * 1e3:.1f} ms", fmt_mib(x.peak_bytes))
    t.add_row("flash, 1 process", f"{r.flash_time_s * 1e3:.1f} ms", "", "", "", fmt_mib(r.flash_peak_bytes))
    return t


def work_table(r) -> Table:
    t = Table(title="work per rank, one forward (scores = query-key products computed; pairs = query chunk x "
                    "key chunk, computed / skipped as wholly in the future)")
    t.add_column("layout")
    for i in range(r.config["world"]):
        t.add_column(f"rank {i}", justify="right")
    t.add_column("busiest / mean", justify="right")
    for x in r.layouts:
        t.add_row(x.layout, *(f"{fmt_count(w['scores'])}  ({w['pairs_computed']}/{w['pairs_skipped']})"
                              for w in x.work), f"{x.imbalance:.2f}")
    return t


def summary(r) -> list[str]:
    W = r.config["world"]
    lines = []
    if r.memory_ratio is not None:
        lines.append(f"memory: the largest rank needs {r.memory_ratio:.2f} x single-process flash's peak "
                     f"(1/W = {1 / W:.2f}); each rank also holds the key/value part arriving from its neighbour")
    est = r.estimate or {}
    if r.check_peak_bytes is not None:
        lines.append(f"memory of the check in this process (shards, PyTorch's answer, the float64 oracle a slice of "
                     f"rows at a time): {fmt_mib(r.check_peak_bytes)}" + (f", estimated {fmt_mib(est['check_bytes'])} "
                                                                        "before the run" if est else ""))
    if est:
        lines.append(f"time: estimated about {est['ranks_s'] + est['flash_s'] + est['check_s']:.0f} s before the run "
                     f"(from this machine's rate on a small case), took {r.seconds:.0f} s")
    if r.overhead is not None:
        lanes, unit = r.lanes, "GPU" if r.config["device"] == "cuda" else "CPU"
        load = r.machine.get("load_average")
        lines.append(f"time: ring {r.ring_time_s * 1e3:.1f} ms per step vs flash {r.flash_time_s * 1e3:.1f} ms in one "
                     f"process; a perfect split over {lanes} {unit}(s) would take {r.flash_time_s / lanes * 1e3:.1f} "
                     f"ms: overhead {r.overhead:+.0%}" + (f" (load average {load:.1f} meanwhile)" if load else ""))
    return lines


def show(r, console) -> None:
    console.print(f"[bold]{headline(r)}[/]")
    console.print(errors_table(r))
    if r.ranks:
        console.print(ranks_table(r))
    console.print(work_table(r))
    for line in summary(r):
        console.print("  " + line)
    verdict = "[green]ALL PASS[/]" if r.passed else "[red]FAIL[/]"
    console.print(f"{verdict}  ({r.seconds:.1f} s)")
