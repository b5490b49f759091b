"""How long the test suite takes: make test's, make test-long's and make test-fast's pytest runs, timed as run.

    .venv/bin/python benchmarks/suite_times.py [--only test,test-long,test-fast] [--out DIR] [--costs DIR]

Runs each target's pytest command exactly as the Makefile does (two workers, the same marks, --check-costs), one
after the other, from this checkout, and times each from start to end; the 1-minute load before and after each says
how quiet the machine was. Writes ``suite-<processor>.json`` (the processor's name in lowercase words, as the other
results here) with each run's seconds, counts (passed, failed, skipped) and loads, and the machine. The README's
figures for the suite are read from this file by tests/test_readme.py. Exit code 1 when a run did not pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlab.results import machine, versions  # noqa: E402
from attnlab.results.host import load_average  # noqa: E402

PYTEST = [sys.executable, "-m", "pytest", "--durations=25", "--check-costs", "-q", "-n", "2"]
RUNS = {  # the Makefile's targets' pytest commands
    "test": [*PYTEST, "--dist", "loadgroup", "-m", "not long"],
    "test-long": [*PYTEST, "-m", "long"],
    "test-fast": [*PYTEST, "--dist", "loadgroup", "-m", "not slow"],
}


def processor_file(cpu: str) -> str:
    words = re.findall(r"[a-z0-9]+", cpu.lower().replace("(r)", "").replace("(tm)", ""))
    keep = [w for w in words if w not in ("processor", "cpu", "core")][:3]
    return "suite-" + "-".join(keep or ["unknown"]) + ".json"


def run(target: str, costs: Path | None = None) -> dict:
    """One target's pytest run, timed; ``costs``: a folder for each test's CPU seconds (costs-TARGET.json)."""
    cmd = RUNS[target] + ([f"--costs-json={costs / f'costs-{target}.json'}"] if costs else [])
    print(f"make {target}: {' '.join(cmd[1:])}", flush=True)
    before = load_average()
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    seconds = time.monotonic() - t0
    tail = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}
    marks, inside = [], False  # the mark check's summary: from its "CPU time:" line to the next "=" separator
    for line in p.stdout.splitlines():
        inside = inside or ("CPU time:" in line and "--check-costs" in line)
        if inside and line.startswith("="):
            break
        if inside and line.strip():
            marks.append(line.strip())
    out = {"seconds": round(seconds, 1), "counts": counts, "load_before": before, "load_after": load_average(),
           "returncode": p.returncode, "summary": tail, "marks": marks}
    whole = round(seconds)
    print(f"  {whole // 60} min {whole % 60} s: {tail} (load {before} -> {out['load_after']})", flush=True)
    if p.returncode != 0:  # what failed, whole (the durations and the summary after it would push it out of a tail)
        failures = re.search(r"^=+ (FAILURES|ERRORS) =+$.*?(?=^=+ (warnings summary|slowest|short test summary))",
                             p.stdout, re.M | re.S)
        print(failures.group(0)[-20000:] if failures else p.stdout[-4000:], p.stdout[-4000:], p.stderr[-2000:],
              sep="\n")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(RUNS), help="the targets to time, comma-separated")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--costs", metavar="DIR", help="write each run's per-test CPU seconds to DIR/costs-TARGET.json")
    args = p.parse_args(argv)
    targets = [t for t in args.only.split(",") if t]
    unknown = [t for t in targets if t not in RUNS]
    if unknown:
        p.error(f"--only {','.join(unknown)}: choose from {', '.join(RUNS)}")
    host = machine()
    path = Path(args.out) / processor_file(host.get("cpu") or "")
    old = json.loads(path.read_text()) if path.exists() else {}
    costs = Path(args.costs).resolve() if args.costs else None
    if costs:
        costs.mkdir(parents=True, exist_ok=True)
    runs = {**old.get("runs", {}), **{t: run(t, costs) for t in targets}}
    path.write_text(json.dumps({"machine": host, "versions": versions(), "runs": runs}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0 if all(r["returncode"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
