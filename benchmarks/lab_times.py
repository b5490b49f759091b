"""The lab's times: does the matrix form's time grow with T as its work does when `attnlab lab check` times it?

    .venv/bin/python benchmarks/lab_times.py [--rounds 3] [--threads 1,N] [--out DIR]

Level 2's solution (tests/lab/level_solutions.py) is loaded as a learner's file and timed as the lab
times it -- in its own judged process (attnlab.lab.judged), T = 512, 1024, 2048, one head of width 64
-- on each thread count given (default: the lab's, attnlab.lab.measure.THREADS, and torch's own, one
a core), the counts taking turns for ``--rounds`` rounds. A matrix form does T² work, so its time
should grow at least as T^1.6 from 512 to 2048; with several threads, a small call is mostly
threads waiting, and the growth reads low. Each round prints the times, the growth exponent
log(t2048 / t512) / log 4, and the 1-minute load before and after; the last line says whether the
lab's count gave at least T^1.6 in every round timed at load 2 or under (a round above load 2 is
shown and not counted: other programs' work is in it). Writes DIR/lab_times.json.
Exit code 1 when a counted round falls short, 2 when no round was counted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the solution is tests.lab.*

from attnlab.lab import judged, measure  # noqa: E402
from attnlab.results import machine, versions  # noqa: E402
from attnlab.results.host import load_average  # noqa: E402

SEQS = (512, 1024, 2048)
TARGET, QUIET = 1.6, 2.0  # the growth the lab's count must give, at a load no higher than QUIET
LEARNER = """import sys
sys.path.insert(0, {repo!r})
from tests.lab.level_solutions import attention_matrix as solution


def attention_matrix(q, k, v):
    return solution(q, k, v)
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default=f"{measure.THREADS},{os.cpu_count() or 1}",
                   help="thread counts, comma-separated (default: the lab's and one a core)")
    p.add_argument("--out", default="attnlab-out")
    args = p.parse_args(argv)
    counts = list(dict.fromkeys(int(c) for c in args.threads.split(",")))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab_matrix.py"
        path.write_text(LEARNER.format(repo=str(Path(__file__).resolve().parents[1])))
        with judged.open_learner(f"{path}:attention_matrix", "matrix") as learner:
            for r in range(args.rounds):
                for count in counts if r % 2 == 0 else counts[::-1]:
                    before = load_average()
                    timings, _, _ = judged.measure(learner, SEQS, measure.BUDGET_S, threads=count)
                    after = load_average()
                    t = {x.seq: x.time_s for x in timings}
                    growth = math.log(t[2048] / t[512]) / math.log(4) if t.get(2048) and t.get(512) else None
                    rows.append({"round": r, "threads": count, "times_s": t, "growth": growth,
                                 "load": [before, after], "threads_seen": [x.threads for x in timings]})
                    print(f"round {r} threads {count}: " + ", ".join(f"T={T} {s * 1e3:.3g} ms" for T, s in t.items()
                                                                    if s) + f"; T^{growth:.2f} from 512 to 2048; "
                          f"load {before:.1f} -> {after:.1f}", flush=True)
    mine = [x for x in rows if x["threads"] == measure.THREADS]
    counted = [x for x in mine if max(x["load"]) <= QUIET and x["growth"] is not None]
    for count in counts:
        g = [x["growth"] for x in rows if x["threads"] == count and x["growth"] is not None]
        print(f"threads {count}: growth from 512 to 2048, median T^{statistics.median(g):.2f} (rounds: "
              + ", ".join(f"{v:.2f}" for v in g) + ")")
    held = bool(counted) and all(x["growth"] >= TARGET for x in counted)
    print(f"the lab's {measure.THREADS} thread: " + (
        f"{'holds' if held else 'does not hold'}: at least T^{TARGET} in " + (
            f"all {len(counted)}" if held else f"{sum(x['growth'] >= TARGET for x in counted)} of {len(counted)}")
        + f" rounds at load {QUIET} or under" if counted else
        f"no round at load {QUIET} or under: run it on a quieter machine"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lab_times.json").write_text(json.dumps({"rows": rows, "target": TARGET, "quiet_load": QUIET,
                                                     "held": held, "machine": machine(), "versions": versions(),
                                                     "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                                    indent=1))
    return 0 if held else 2 if not counted else 1


if __name__ == "__main__":
    sys.exit(main())
