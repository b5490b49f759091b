"""`attnlab verify --quick` on a correct kernel, this checkout against an earlier revision, side by side.

    .venv/bin/python benchmarks/verify_quick.py [--against REV] [--rounds N] [--impl matrix] [--out DIR]

The kernel is a kernel author's: an SDPA-signature function in plain PyTorch operations (scores, mask, softmax in
float32 for half inputs, dropout), written to a folder of its own and judged as ``--impl kernel:attention`` -- in a
process of its own, as verify judges every function that is not one of attnlab's forms. ``--impl matrix`` times
attnlab's matrix form instead (it takes sinks, so it is judged on the sink cases as well).

REV (default: the last commit before the judge's probes, 1fa0206^) is checked out with ``git worktree`` into a
temporary folder and run from the same virtual environment with its ``src`` first on PYTHONPATH. The two commands
run in turn, A B A B ..., after one warm-up run of each; each run's wall-clock and CPU seconds (its own and its
children's) are taken, and the table gives each side's median and the median of the paired ratios this / REV. Writes
DIR/verify_quick-<processor>.json and .txt, with the load average before and after, and the cases each side judged.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.results import machine, versions  # noqa: E402
from attnlab.results.host import load_average  # noqa: E402

KERNEL = '''import math

import torch


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Correct attention in plain operations: scores and softmax in float32 for half inputs."""
    L, S, dt = query.shape[-2], key.shape[-2], query.dtype
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        r = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(r, -3), value.repeat_interleave(r, -3)
    if dt in (torch.float16, torch.bfloat16):
        query, key = query.float(), key.float()
    s = (query @ key.transpose(-2, -1)) * (1 / math.sqrt(query.shape[-1]) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=s.device).tril(), -math.inf)
    if attn_mask is not None:
        hidden = ~attn_mask if attn_mask.dtype == torch.bool else torch.isneginf(attn_mask)  # (-inf by masked_fill:
        s = s if attn_mask.dtype == torch.bool else s + attn_mask.masked_fill(hidden, 0.0)  # a row hidden whole
        s = s.masked_fill(hidden, -math.inf)  # has no gradient through its NaN softmax)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0).to(dt)
    if dropout_p > 0:
        p = torch.nn.functional.dropout(p, dropout_p)
    return p @ value
'''


def timed(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the command and its children, its last line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr.strip()[-300:]
    if p.returncode != 0:
        raise SystemExit(f"verify_quick: {' '.join(cmd)} exited {p.returncode}: {last}")
    return wall, cpu, last


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="1fa0206^", help="the revision to time beside this checkout")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--impl", default="kernel:attention", help="kernel:attention (the author's kernel) or a form")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    rev = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run(["git", "worktree", "add", "--detach", str(tmp / "rev"), rev], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            (tmp / "work").mkdir()
            (tmp / "work" / "kernel.py").write_text(KERNEL)
            cmd = [sys.executable, "-m", "attnlab", "verify", "--quick", "--impl", args.impl]
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            sides = {"this": {**env, "PYTHONPATH": str(ROOT / "src")},
                     rev: {**env, "PYTHONPATH": str(tmp / "rev" / "src")}}
            load = [load_average()]
            said = {name: timed(cmd, e, tmp / "work")[2] for name, e in sides.items()}  # the warm-up runs
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
            for i in range(args.rounds):
                print(f"round {i + 1} of {args.rounds}", flush=True)
                for name, e in sides.items():
                    runs[name].append(timed(cmd, e, tmp / "work")[:2])
            load.append(load_average())
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "rev")], cwd=ROOT, capture_output=True)
    med = {name: {"wall": statistics.median(w for w, _ in r), "cpu": statistics.median(c for _, c in r)}
           for name, r in runs.items()}
    ratio = {k: statistics.median(a[j] / b[j] for a, b in zip(runs["this"], runs[rev], strict=True))
             for j, k in enumerate(("wall", "cpu"))}
    spread = {k: (min(a[j] / b[j] for a, b in zip(runs["this"], runs[rev], strict=True)),
                  max(a[j] / b[j] for a, b in zip(runs["this"], runs[rev], strict=True)))
              for j, k in enumerate(("wall", "cpu"))}
    cases = {name: re.search(r"(\d+) passed, (\d+) failed, (\d+) errors, (\d+) skipped", s) for name, s in said.items()}
    m = machine()
    lines = [f"attnlab verify --quick --impl {args.impl}: this checkout against {rev} ({args.against}), "
             f"{args.rounds} alternated rounds after one warm-up each",
             f"{m.get('cpu', '?')}, {os.cpu_count()} CPUs; load {load[0]:.2f} before, {load[1]:.2f} after"]
    for name in sides:
        c = cases[name]
        judged = f"{c[1]} passed, {c[2]} failed, {c[4]} skipped" if c else said[name]
        lines.append(f"  {name:>8}: wall {med[name]['wall']:.2f} s, CPU {med[name]['cpu']:.2f} s (medians); {judged}")
    for k in ("wall", "cpu"):
        lines.append(f"  this / {rev} {k}: {ratio[k]:.3f} (paired; {spread[k][0]:.3f}-{spread[k][1]:.3f})")
    text = "\n".join(lines)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    words = re.findall(r"[a-z0-9]+", str(m.get("cpu", "unknown")).lower().replace("(r)", "").replace("(tm)", ""))
    stem = "verify_quick-" + "-".join([w for w in words if w not in ("processor", "cpu", "core")][:2] or ["unknown"])
    stem += "" if args.impl == "kernel:attention" else "-" + re.sub(r"\W+", "_", args.impl)
    (args.out / f"{stem}.txt").write_text(text + "\n")
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"against": rev, "impl": args.impl, "rounds": args.rounds, "runs": runs, "medians": med, "ratio": ratio,
         "spread": spread, "said": said, "load": load, "machine": m, "versions": versions()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
