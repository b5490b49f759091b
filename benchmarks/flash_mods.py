"""The flash form with a score modifier against FlexAttention compiled with the same modifier, side by side.

    .venv/bin/python benchmarks/flash_mods.py [--quick] [--out DIR] [--threads N] [--repeats N] [--lengths ...]

Batch 1, 8 heads, head dim 64, float32. For soft-capping (30, so that the scores are capped), ALiBi (the paper's
slopes) and a learned T5 bias (a table that requires grad), each under the causal mask and a sliding window of
512, forward and forward + backward, three sides are timed in one process, alternating calls:

  flash       the flash form as it is: a built-in modifier fused into its tile (attnlab.kernels.flash, [P12])
  function    the flash form given the same modifier as a plain function (no closed form): what it did before
  flex        torch.compile(flex_attention) with the same score_mod and the mask's block mask

The table reports each side's median and the median of the ratios of a round's calls, flash / flex (the target:
at most 1.0, issue 31) and flash / function (the fusion's own effect). FlexAttention has no backward on a CPU
(torch 2.13 raises NotImplementedError), so the forward + backward rows time flash against the function path
alone and say so. Writes DIR/flash_mods-<processor>.json and .txt with every number and the load average before
and after: the comparison depends on the processor.
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
from attnlab import masks, mods
from attnlab.kernels import tuned
from attnlab.measure import flex, timing
from attnlab.measure.tune import in_words
from attnlab.results import machine, versions

sys.path.insert(0, str(Path(__file__).parent))
from flash_targets import finish, slug  # noqa: E402

B, H, D = 1, 8, 64
TARGET = 1.0  # flash / compiled flex with the same modifier


def modifiers(learned: bool = True) -> dict:
    """The three modifiers of the issue, fresh (a T5 table that requires grad, as a trained model's does)."""
    g = torch.Generator().manual_seed(0)
    table = (torch.randn(H, 32, generator=g) * 0.1).requires_grad_(learned)
    return {"softcap(30)": mods.softcap(30.0), "alibi(8)": mods.alibi(H),
            "t5 bias (learned)": mods.relative_bias(table, max_distance=128, bidirectional=False)}


def as_function(mod: mods.Mod) -> mods.Mod:
    """The same modifier as a plain function (not a mods.Fused): the flash form calls it on every tile."""
    return mods.Mod(mod.fn, mod.name + " as a function", mod.params)


def sides(mod, mask, T, backward: bool) -> dict:
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g).requires_grad_(backward) for _ in range(3))
    go = torch.randn(B, H, T, D, generator=g)
    kw = {"is_causal": True} if mask == "causal" else {"attn_mask": masks.sliding_window(512)}
    plain = as_function(mod)

    def call(fn):
        if not backward:
            def run():
                with torch.no_grad():
                    fn()
            return run

        def run():
            q.grad = k.grad = v.grad = None
            for p in mod.params:
                p.grad = None
            fn().backward(go)
        return run

    runs = {"flash": call(lambda: attnlab.attention(q, k, v, impl="flash", score_mod=mod, **kw)),
            "function": call(lambda: attnlab.attention(q, k, v, impl="flash", score_mod=plain, **kw))}
    if not backward:  # no flex backward on a CPU
        runs["flex"] = call(lambda: flex.attention(q, k, v, score_mod=mod, **kw))
    return runs


def rounds(runs: dict, repeats: int) -> dict:
    """Each side once to warm up (flex compiles here: its first call is kept), then ``repeats`` rounds of every side
    in turn, the order reversed every other round (:func:`attnlab.measure.timing.alternate`)."""
    compile_s = {}
    for name, f in runs.items():
        t0 = time.perf_counter()
        f()
        compile_s[name] = time.perf_counter() - t0
    times = timing.alternate(runs, repeats, warm=())
    ratio = {f"flash/{o}": statistics.median(a / b for a, b in zip(times["flash"], times[o], strict=True))
             for o in ("flex", "function") if o in times}
    return {"median_s": {n: statistics.median(t) for n, t in times.items()}, "times_s": times, "ratio": ratio,
            "first_call_s": compile_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="T = 1024 only, 3 rounds (a smoke run, not the targets)")
    p.add_argument("--out", default="attnlab-out", help="folder for flash_mods-<processor>.json and .txt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="rounds of alternated calls per row (default 5)")
    p.add_argument("--lengths", default="4096,8192", help="sequence lengths (default 4096,8192)")
    p.add_argument("--only", default="", help="run only the rows whose label contains this text")
    args = p.parse_args(argv)
    if flex.unavailable():
        p.error(f"compiled flex cannot run here: {flex.unavailable()}")
    torch.set_num_threads(args.threads)
    lengths = [1024] if args.quick else [int(x) for x in args.lengths.split(",") if x.strip()]
    repeats = 3 if args.quick else args.repeats
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    out = {"machine": machine(), "versions": versions(), "threads": args.threads, "target": TARGET,
           "config": {"batch": B, "heads": H, "head_dim": D, "dtype": "float32", "lengths": lengths,
                      "repeats": repeats, "quick": args.quick, "window": 512},
           "load_average_before": os.getloadavg(), "tiles": tuned.current().as_dict(), "rows": []}
    say(f"{out['machine']['cpu']}, {args.threads} threads, load average before {out['load_average_before'][0]:.1f}"
        + (" (quick: not the targets)" if args.quick else ""))
    say(f"flash's {in_words(tuned.current())}")
    for T in lengths:
        for name in modifiers():
            for mask in ("causal", "window 512"):
                for backward in (False, True):
                    label = f"{name} {mask} {'forward + backward' if backward else 'forward'}"
                    if args.only and args.only not in label:
                        continue
                    mod = modifiers()[name]
                    r = rounds(sides(mod, "causal" if mask == "causal" else "window", T, backward), repeats)
                    met = r["ratio"]["flash/flex"] <= TARGET if "flash/flex" in r["ratio"] else None
                    out["rows"].append({"modifier": name, "mask": mask, "backward": backward, "T": T, **r,
                                        "met": met})
                    m = r["median_s"]
                    peer = ("flex: no backward on a CPU" if met is None else
                            f"flex {m['flex'] * 1e3:8.1f} ms  flash/flex {r['ratio']['flash/flex']:5.2f} "
                            f"({'met' if met else 'MISSED'} <= {TARGET})")
                    say(f"{label:<44} T={T:<5} flash {m['flash'] * 1e3:8.1f} ms  function {m['function'] * 1e3:8.1f} "
                        f"ms  flash/function {r['ratio']['flash/function']:5.2f}  {peer}")
    finish(out, lines, args.out, f"flash_mods-{slug(out['machine']['cpu'])}" + ("-quick" if args.quick else ""), say)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
