"""verify against the blind corpus of API kernels, at several seeds: kills, the lines named, false lines.

    .venv/bin/python benchmarks/api_corpus.py [--seeds 0:5] [--out DIR]

The corpus is tests/api_mutants.py: kernels written to flash_attn_func, flash_attn_varlen_func, flex_attention,
flash_attn_with_kvcache over a paged cache and SDPA, by someone who had not read the judge's causes, each labelled
with the bugs it carries (a right kernel carries none). SDPA's, flash-attn's and flex's kernels run on their APIs'
quick grids in float32, float64 and bfloat16, forward and backward; varlen's and paged-decode's forward only
(tests/api_corpus_run.py). Prints the tables per seed and writes DIR/api_corpus.json: per seed and API family,
right kernels failed, wrong ones killed, single bugs named by the first line, two-bug kernels with every bug among
the lines, false lines, the seconds. Exit code 1 when a right kernel failed or a wrong one passed at any seed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: the corpus is tests.*

from attnlab.results import machine, versions  # noqa: E402
from tests import api_corpus_run as R  # noqa: E402
from tests import kv_bugs  # noqa: E402


def _dense(outcomes) -> dict:
    single = [o for o in outcomes.values() if len(o.labels) == 1 and o.wanted[0]]
    multi = [o for o in outcomes.values() if len(o.labels) > 1]
    return {"right": sum(not o.labels for o in outcomes.values()),
            "right_failed": [o.name for o in outcomes.values() if not o.labels and o.killed],
            "wrong": sum(bool(o.labels) for o in outcomes.values()),
            "wrong_passed": [o.name for o in outcomes.values() if o.labels and not o.killed],
            "single": len(single), "single_named_first": sum(o.first for o in single),
            "multi": len(multi), "multi_all_named": sum(o.named for o in multi),
            "false_lines": {o.name: o.false for o in outcomes.values() if o.false},
            "outcomes": {o.name: {"labels": list(o.labels), "got": o.keys} for o in outcomes.values()}}


def _kv(outcomes) -> dict:
    rest = R.set_aside(outcomes)
    single = [o for o in rest if len(o.bugs) == 1]
    multi = [o for o in rest if len(o.bugs) > 1]
    return {"right": sum(not o.bugs for o in rest), "right_failed": [o.name for o in rest if not o.bugs and o.killed],
            "wrong": sum(bool(o.bugs) for o in rest), "wrong_passed": [o.name for o in rest if o.bugs and not o.killed],
            "single": len(single), "single_named_first": sum(o.first for o in single),
            "multi": len(multi), "multi_all_named": sum(o.named for o in multi),
            "false_lines": {o.name: o.false for o in rest if o.false},
            "outcomes": {o.name: {"bugs": [list(b) for b in o.bugs], "got": o.keys} for o in outcomes}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0:5", help="a range a:b of seeds (default 0:5)")
    p.add_argument("--out", default="attnlab-out")
    args = p.parse_args(argv)
    a, _, b = args.seeds.partition(":")
    runs, ok = [], True
    for seed in range(int(a), int(b)):
        t0 = time.perf_counter()
        dense = R.run(seed=seed)
        print(f"seed {seed}: SDPA, flash-attn, flex ({time.perf_counter() - t0:.0f} s)\n{R.table(dense)}", flush=True)
        t1 = time.perf_counter()
        kv = R.run_kv(seed=seed)
        print(f"seed {seed}: varlen, paged-decode ({time.perf_counter() - t1:.0f} s)\n"
              f"{kv_bugs.table(R.set_aside(kv))}", flush=True)
        run = {"seed": seed, "seconds": time.perf_counter() - t0, "dense": _dense(dense), "kv": _kv(kv)}
        runs.append(run)
        ok &= not any(run[f]["right_failed"] or run[f]["wrong_passed"] for f in ("dense", "kv"))
    path = Path(args.out) / "api_corpus.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), "versions": versions(), "runs": runs}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
