"""`attnlab bench`: time and peak memory of every form against the sequence length."""

from __future__ import annotations

import re
import time

from . import _args
from ._args import seed
from ._folder import add_force, add_out, keep_other_run, output_folder

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def add_parser(sub):
    # Defaults left as None fall back to BenchConfig's (attnlab.measure.bench), so they are written once;
    # the help repeats them so that `attnlab bench --help` does not have to import torch.
    p = sub.add_parser("bench", help="time and peak memory of the forms against sequence length, with growth "
                                     "exponents and a plot",
                       description="Measure every form at several sequence lengths: median time (min-max), "
                                   "GFLOP/s against this machine's matmul peak, and the extra peak memory over "
                                   "the inputs; fit how each grows with T. Writes bench.json, bench.csv and "
                                   "bench.png. Ctrl-C keeps what was measured.")
    p.add_argument("--seq", type=int, nargs="+", metavar="T", help="sequence lengths (default: 128 512 2048)")
    p.add_argument("--impl", action="append", default=None, metavar="NAME[,NAME...]",
                   help="forms to measure (repeatable; default: every registered form, plus flex)")
    p.add_argument("--backward", action="store_true", help="time forward + backward together")
    p.add_argument("--causal", action="store_true", help="is_causal=True")
    p.add_argument("--mask", metavar="NAME", help="a mask function: causal, causal_lower_right, "
                                                  "sliding_window:W, prefix_lm:N or document:K")
    p.add_argument("--mod", metavar="NAME", help="a score modifier: softcap:CAP (e.g. softcap:30) or alibi; forms "
                                                 "without score modifiers are skipped, flex compiles the same one")
    p.add_argument("--batch", type=int, help="batch size B (default: 1)")
    p.add_argument("--heads", type=int, help="heads H (default: 8)")
    p.add_argument("--head-dim", type=int, help="head dimension d (default: 64)")
    p.add_argument("--dtype", help="float32, float64, bfloat16 or float16 (default: float32)")
    p.add_argument("--threads", type=_args.threads, help="torch threads (default: PyTorch's choice)")
    p.add_argument("--device", choices=["cpu", "cuda"], help="(default: cpu)")
    p.add_argument("--repeats", type=int, help="timed calls per case (default: 5)")
    p.add_argument("--warmup", type=int, help="untimed calls first (default: 1)")
    p.add_argument("--budget", type=_args.seconds, metavar="SECONDS",
                   help="the most one case may take; longer ones are skipped (default: 30)")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="skip cases estimated to need more than SIZE, e.g. 512M or 4G "
                        "(default: 80%% of the memory free)")
    p.add_argument("--matmul-size", type=int, metavar="N",
                   help="the machine's peak is the best N x N matmul (default: 8192 on a GPU; 2048 on a CPU, less "
                        "where one product would take over a quarter of a second, as half precision often does)")
    add_out(p)
    p.add_argument("--seed", type=seed, help="random seed, 0 to 2**32 - 1 (default: 0)")
    add_force(p)
    p.set_defaults(run=run)


def parse_size(text: str) -> int:
    """'512M' -> bytes (K, M, G, T are powers of 1024; a plain number is bytes)."""
    m = SIZE.match(text)
    if not m:
        raise ValueError(f"--max-memory {text!r}: give a size such as 512M, 4G or 2GiB")
    n = float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " ")
    if n < 1:
        raise ValueError(f"--max-memory {text!r} must be at least one byte")
    return int(n)


def run(args) -> int:
    from rich.markup import escape

    from attnlab.measure import bench
    from attnlab.report import bench as report
    from attnlab.report.terminal import console, progress
    from attnlab.results import to_dict, write_json

    from . import Stopped, UsageError

    cfg = _config(args)
    out = output_folder(args.out)  # a folder that cannot take files is a usage error now, not after the run
    keep_other_run(out / "bench.json", to_dict(bench.resolved(cfg)), lambda d: d["config"], "a benchmark", args.force)

    names = cfg.impls or tuple(bench.known_impls())
    note = " (each new flex shape is compiled first; that is not timed)" if "flex" in names else ""
    console.print(f"attnlab bench: {', '.join(names)} at T = {', '.join(map(str, sorted(set(cfg.seq))))}{note}")
    start = time.perf_counter()
    with progress(len(set(cfg.seq)) * len(names), "cases") as advance:
        result = bench.sweep(cfg, progress=advance, say=lambda text: console.print(f"  {escape(text)}"))
    seconds = time.perf_counter() - start

    report.show(result, console)
    if not result.interrupted and all(r.skipped is not None for r in result.results):
        first = result.results[0]
        raise UsageError(f"nothing was measured: every case was skipped (the table says why; {first.impl} at "
                         f"T={first.seq}: {first.skipped}), so no files were written")
    for write in (lambda: write_json(result, out / "bench.json"), lambda: report.write_csv(result, out / "bench.csv"),
                  lambda: report.figure(result, out / "bench.png")):
        console.print(f"wrote {write()}")  # each said as soon as it is whole: a full disk stops at the next
    if result.interrupted:  # the cases measured are kept: said on stderr, exit 130
        done = sum(r.status != "interrupted" for r in result.results)
        kept = (f"bench.json, bench.csv and bench.png in {out} keep the {done} of {len(result.results)} cases done "
                "before it: run it again to measure every case (it starts over)" if done else
                "no case was done before it: run it again")
        raise Stopped(kept, f"after {seconds:.0f} s")
    console.print(f"done in {seconds:.0f} s")
    return 0


def _config(args):
    """The BenchConfig the flags ask for (flags left out keep BenchConfig's defaults), or a UsageError."""
    from attnlab.measure import bench

    from . import UsageError

    impls = [s.strip() for item in (args.impl or []) for s in item.split(",")]
    if "" in impls:  # an empty name must not quietly mean "every form"
        given = " ".join(f"--impl {item!r}" for item in args.impl)
        raise UsageError(f"{given}: an empty form name; give one or more of {', '.join(bench.known_impls())}, or "
                         "leave --impl out to measure every form")
    given = {"seq": tuple(args.seq) if args.seq else None, "impls": tuple(dict.fromkeys(impls)) or None,
             "batch": args.batch, "heads": args.heads, "head_dim": args.head_dim, "dtype": args.dtype,
             "device": args.device, "threads": args.threads, "warmup": args.warmup, "repeats": args.repeats,
             "budget_s": args.budget, "mask": args.mask, "mod": args.mod, "seed": args.seed,
             "matmul_n": args.matmul_size}
    try:
        given["memory_limit_bytes"] = parse_size(args.max_memory) if args.max_memory is not None else None
        cfg = bench.BenchConfig(causal=args.causal, backward=args.backward,
                                **{k: v for k, v in given.items() if v is not None})
        bench.check_named(cfg)
        return cfg
    except ValueError as e:
        raise UsageError(str(e)) from None
