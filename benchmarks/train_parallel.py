"""Training across 2 local processes against one: per-rank peak memory and tokens per second, side by side.

    .venv/bin/python benchmarks/train_parallel.py [--seq 1024 4096] [--batch 2] [--grids dp cp] [--out DIR]

A 2-layer GPT (d_model 64, 2 heads, vocabulary 96) trains one step at a time on a random global batch
of ``--batch`` sequences of each length ``--seq``, in three ways: one process; data parallel over 2
ranks (each rank half the sequences); context parallel over 2 ranks (each rank half of every sequence,
zigzag, ring attention). Every rank and the single process run one torch thread and are measured the
same way (:mod:`attnlab.train.step`): the extra peak resident memory of one full step, and the
median time of a step. On a machine with fewer free cores than ranks the speeds say little; the memory
does not depend on that. Writes DIR/train_parallel.json with every number.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from attnlab.results import write_json
from attnlab.results.host import load_average, machine, versions
from attnlab.train import step as train_step
from attnlab.train import train

MB = 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--grids", nargs="+", choices=["dp", "cp"], default=["dp", "cp"],
                    help="which of the two 2-rank grids to measure (default: both)")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    rows = []
    for T in args.seq:
        cfg = dataclasses.replace(train.PRESETS["tiny"], block_size=T, batch_size=args.batch, n_layer=2, d_model=64,
                                  n_head=2)
        grids = {"dp": ("data parallel", 2, 1), "cp": ("context parallel", 1, 2)}
        for name, dp, cp in (grids[g] for g in args.grids):
            r = train_step.run(cfg, 96, dp, cp, repeats=args.repeats)
            one, ranks = r["one"], r["ranks"]
            peak = max(x.peak_bytes for x in ranks)
            tps = min(x.tokens_per_s for x in ranks)  # the slowest rank sets the pace
            row = {"seq": T, "batch": args.batch, "grid": name, "dp": dp, "cp": cp, "ranks": ranks, "one": one,
                   "peak_ratio": peak / one.peak_bytes, "speed_ratio": tps / one.tokens_per_s}
            rows.append(row)
            print(f"T={T:>5} {name:<16}: per-rank peak {peak / MB:7.1f} MiB vs one process {one.peak_bytes / MB:7.1f} "
                  f"MiB ({row['peak_ratio']:.2f}x); {tps:8,.0f} tokens/s vs {one.tokens_per_s:8,.0f} "
                  f"({row['speed_ratio']:.2f}x)", flush=True)
    report = {"rows": rows, "machine": {**machine(), "load_average": load_average()}, "versions": versions()}
    print(f"wrote {write_json(report, Path(args.out) / 'train_parallel.json')}")


if __name__ == "__main__":
    main()
