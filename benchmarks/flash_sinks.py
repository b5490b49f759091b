"""The flash form with attention sinks against the same call without them, side by side.

    .venv/bin/python benchmarks/flash_sinks.py [--quick] [--out DIR] [--threads N] [--repeats N] [--lengths ...]

Batch 1, 8 heads, head dim 64, float32, causal; forward, and forward + backward with the sinks requiring grad (as a
model's learnable sinks do). The two sides run in one process, alternating calls, the order reversed every other
round (as :func:`attnlab.measure.timing.alternate` does), so that a busy spell of a shared machine slows both alike;
the table reports each side's median and the median of the ratios of a round's calls, sinks / plain, in wall-clock
time and in the process's CPU time. On a machine shared with other work (a load average above its cores) the wall
clock of a call stretches with whatever else runs, by up to several times; its CPU time stretches far less
(tests/costs.py makes the same choice for the test suite), so the CPU ratio is the steadier reading there and both
are recorded.

Target: at most 1.05. What the sinks add is per row, not per score: the forward folds each row's sink into its
running numbers once, after its last key tile (attnlab.kernels.online.add_sink), and the backward takes the sinks'
gradient from the numbers it saved per row (flash_backward.Weights.sink_grad) -- no pass over the scores. The one
change inside the tiles: with sinks a row that sees one key has a gradient, so the backward skips flash.py's [P10]
exact zeros for such rows (none under the causal mask at these sizes but the first row).

Writes DIR/flash_sinks-<processor>.json and .txt with every number and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import attnlab
from attnlab.kernels import tuned
from attnlab.measure.tune import in_words
from attnlab.results import machine, versions

sys.path.insert(0, str(Path(__file__).parent))
from flash_targets import finish, slug  # noqa: E402

B, H, D = 1, 8, 64
TARGET = 1.05  # sinks / plain, forward and forward + backward


def sides(T: int, backward: bool) -> dict:
    """The two calls on the same inputs: with sinks (drawn as a trained model's might be, N(0, 1)) and without."""
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g).requires_grad_(backward) for _ in range(3))
    sinks = torch.randn(H, generator=g).requires_grad_(backward)
    go = torch.randn(B, H, T, D, generator=g)

    def call(**kw):
        if not backward:
            def run():
                with torch.no_grad():
                    attnlab.attention(q, k, v, is_causal=True, impl="flash", **kw)
            return run

        def run():
            q.grad = k.grad = v.grad = sinks.grad = None
            attnlab.attention(q, k, v, is_causal=True, impl="flash", **kw).backward(go)
        return run

    return {"sinks": call(sinks=sinks), "plain": call()}


def rounds(runs: dict, repeats: int) -> dict:
    """Each side once to warm up, then ``repeats`` rounds calling both, the order reversed every other round: each
    call's wall-clock and CPU seconds, each side's medians and the paired median ratios sinks / plain."""
    for f in runs.values():
        f()
    wall: dict = {n: [] for n in runs}
    cpu: dict = {n: [] for n in runs}
    order = list(runs)
    for r in range(repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            w0, c0 = time.perf_counter(), time.process_time()
            runs[name]()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    out = {}
    for what, times in (("wall", wall), ("cpu", cpu)):
        ratios = [a / b for a, b in zip(times["sinks"], times["plain"], strict=True)]
        out[what] = {"median_s": {n: statistics.median(t) for n, t in times.items()}, "times_s": times,
                     "ratio": statistics.median(ratios), "ratios": ratios}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="T = 512 only, 3 rounds (a smoke run, not the target)")
    p.add_argument("--out", default="attnlab-out", help="folder for flash_sinks-<processor>.json and .txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=9, help="rounds of alternated calls per row (default 9)")
    p.add_argument("--lengths", default="2048", help="sequence lengths (default 2048)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lengths = [512] if args.quick else [int(x) for x in args.lengths.split(",") if x.strip()]
    repeats = 3 if args.quick else args.repeats
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    out = {"machine": machine(), "versions": versions(), "threads": args.threads, "target": TARGET,
           "config": {"batch": B, "heads": H, "head_dim": D, "dtype": "float32", "mask": "causal", "lengths": lengths,
                      "repeats": repeats, "quick": args.quick},
           "load_average_before": os.getloadavg(), "tiles": tuned.current().as_dict(), "rows": []}
    say(f"{out['machine']['cpu']}, {args.threads} threads, load average before {out['load_average_before'][0]:.1f}"
        + (" (quick: not the target)" if args.quick else ""))
    say(f"flash's {in_words(tuned.current())}")
    for T in lengths:
        for backward in (False, True):
            label = "forward + backward" if backward else "forward"
            r = rounds(sides(T, backward), repeats)
            met = {what: r[what]["ratio"] <= TARGET for what in r}
            out["rows"].append({"T": T, "backward": backward, **r, "met": met})
            for what in ("wall", "cpu"):
                x, m = r[what], r[what]["median_s"]
                say(f"causal {label:<19} T={T:<5} {what:<4} sinks {m['sinks'] * 1e3:8.1f} ms  plain "
                    f"{m['plain'] * 1e3:8.1f} ms  sinks/plain {x['ratio']:5.3f} (paired median; rounds "
                    f"{min(x['ratios']):.3f}-{max(x['ratios']):.3f})  {'met' if met[what] else 'MISSED'} <= {TARGET}")
    finish(out, lines, args.out, f"flash_sinks-{slug(out['machine']['cpu'])}" + ("-quick" if args.quick else ""), say)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
