"""The tolerance rule over many seeds and many random configurations: pass counts per form.

    .venv/bin/python benchmarks/verify_sweep.py [--quick-seeds 0:20] [--full-seeds 0:3] [--random 2000]
                                                [--forms loops,matrix,flash,sdpa] [--out DIR]

1. `attnlab verify --quick` (every dtype) at each seed of --quick-seeds, and the full grid (with the
   L = 1025 case) at each seed of --full-seeds, for every form and for PyTorch's own `sdpa`;
2. --random seeded random configurations per form (attnlab.judge.verify.random_cases: batch dims,
   GQA/MQA, L != S, E != Ev, odd sizes up to 48, every mask kind, causal, learnable biases, any scale,
   dropout, float32 and float64), output and gradients; `sdpa`'s dropout is read through v = I.

Prints one line per (form, sweep) as it goes and writes DIR/verify_sweep.json with every count and
the worst error / limit seen. Exit code 1 when anything failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import attnlab
from attnlab.judge import verify
from attnlab.results import machine, versions


def span(text: str) -> range:
    a, _, b = text.partition(":")
    return range(int(a), int(b))


def worst_ratio(rows) -> float:
    return max((r.worst.err / r.worst.allowed for r in rows if r.worst is not None and r.worst.allowed > 0),
               default=0.0)


def failures(rows) -> list[dict]:
    return [{"form": r.form, "case": r.case, "dtype": r.dtype, "status": r.status, "detail": r.detail,
             "worst": r.worst and r.worst.__dict__} for r in rows if r.status not in ("pass", "skipped")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick-seeds", type=span, default=span("0:20"))
    p.add_argument("--full-seeds", type=span, default=span("0:3"))
    p.add_argument("--random", type=int, default=2000, help="random configurations per form")
    p.add_argument("--forms", default="loops,matrix,flash,sdpa")
    p.add_argument("--out", default="attnlab-out")
    args = p.parse_args(argv)
    forms = {f: attnlab.kernels.get(f).fn for f in args.forms.split(",")}
    result = {"machine": machine(), "versions": versions(), "grid": [], "random": []}

    def log(line: str) -> None:
        print(line, flush=True)

    for label, seeds, long in (("quick", args.quick_seeds, False), ("full", args.full_seeds, True)):
        cases = verify.default_cases(long=long)
        for name, fn in forms.items():
            t, rows_all, passed = time.perf_counter(), [], 0
            for s in seeds:
                r = verify.verify({name: fn}, cases, seed=s)
                rows_all += r.rows
                passed += r.passed
            entry = {"form": name, "grid": label, "seeds": [seeds.start, seeds.stop - 1], "seeds_passed": passed,
                     "rows": len(rows_all), "rows_passed": sum(r.status in ("pass", "skipped") for r in rows_all),
                     "worst_err_over_limit": worst_ratio(rows_all), "failures": failures(rows_all),
                     "seconds": time.perf_counter() - t}
            result["grid"].append(entry)
            log(f"verify {label:5s} seeds {seeds.start}-{seeds.stop - 1}  {name:6s}  {passed}/{len(seeds)} seeds pass "
                f"({entry['rows_passed']}/{entry['rows']} rows), worst error/limit "
                f"{entry['worst_err_over_limit']:.3f}, {entry['seconds']:.0f} s")

    for name, fn in forms.items():
        form = attnlab.kernels.get(name)
        small = form.slow  # the loops form: small sizes, as its max_work says
        cases = verify.random_cases(args.random, seed=10_000, max_len=6 if small else 48, max_dim=8 if small else 64)
        t, rows, counts = time.perf_counter(), [], collections.Counter()
        for i, c in enumerate(cases):
            row = verify.check_case(name, fn, c, 10_000 + i, accepts_masks=True, shared_dropout=form.shared_dropout)
            rows.append(row)
            counts[row.status] += 1
        entry = {"form": name, "configs": len(cases), "passed": counts["pass"], "counts": dict(counts),
                 "worst_err_over_limit": worst_ratio(rows), "failures": failures(rows),
                 "seconds": time.perf_counter() - t}
        result["random"].append(entry)
        log(f"random configs  {name:6s}  {counts['pass']}/{len(cases)} pass, worst error/limit "
            f"{entry['worst_err_over_limit']:.3f}, {entry['seconds']:.0f} s")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    log(f"wrote {out / 'verify_sweep.json'}")
    ok = all(not e["failures"] for e in result["grid"] + result["random"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
