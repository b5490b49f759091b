"""`attnlab ring`: ring attention across local processes, checked against one process and measured."""

from __future__ import annotations

from ._args import seed
from ._folder import json_folder, save_json


def add_parser(sub):
    # Defaults left as None fall back to RingConfig's (attnlab.distributed.ring), so they are written once.
    p = sub.add_parser("ring", help="ring attention over N local processes: errors, per-rank memory and time, "
                                    "work per rank",
                       description="Start N processes (gloo on 127.0.0.1), split the sequence across them, run ring "
                                   "attention and compare the gathered output (and gradients with --backward) with "
                                   "single-process attention under the tolerance rule. Prints the max errors, each "
                                   "rank's time per step and peak memory against single-process flash, and the "
                                   "work per rank in both layouts. Started by torchrun, each process joins "
                                   "torchrun's group instead (NCCL on GPUs) and rank 0 reports.")
    p.add_argument("--world", type=int, help="number of processes N (default: 2)")
    p.add_argument("--seq", type=int, help="total sequence length T, split across the ranks (default: 2048)")
    p.add_argument("--heads", type=int, help="query heads H (default: 4)")
    p.add_argument("--kv-heads", type=int, help="key/value heads, fewer than H for grouped-query attention")
    p.add_argument("--head-dim", type=int, help="head dimension d (default: 64)")
    p.add_argument("--batch", type=int, help="batch size B (default: 1)")
    p.add_argument("--causal", action="store_true", help="causal attention over the global positions")
    p.add_argument("--layout", choices=["contiguous", "zigzag"], help="how the sequence is split (default: "
                                                                      "contiguous)")
    p.add_argument("--backward", action="store_true", help="forward + backward, and check dq, dk, dv too")
    p.add_argument("--dtype", help="float32, float64, bfloat16 or float16 (default: float32)")
    p.add_argument("--repeats", type=int, help="timed steps per rank (default: 3)")
    p.add_argument("--no-measure", action="store_true", help="check only: no timing or memory")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="process-group timeout: a transfer that cannot finish fails after this (default: 30)")
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="each launch (the ranks, then single-process flash) is stopped after this; a run "
                        "estimated to take longer is refused before it starts (default: 600)")
    p.add_argument("--seed", type=seed, help="random seed, 0 to 2**32 - 1 (default: 0)")
    p.add_argument("--json", metavar="PATH", help="also write the result as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab.distributed import torchrun as ring_torchrun
    from attnlab.report import ring as report
    from attnlab.report.terminal import console

    cfg = _config(args)
    json_folder(args.json)  # before the run, not after it: a folder that cannot be made is known now
    if ring_torchrun.under_torchrun():
        result = ring_torchrun.run(cfg)
        if result is None:  # not rank 0: rank 0 reports for everyone
            return 0
    else:
        result = _run_here(cfg)
        if result is None:
            return 1
    report.show(result, console)
    save_json(result, args.json, indent="  ")
    return 0 if result.passed else 1


def _config(args):
    """The RingConfig the flags ask for; under torchrun, with its number of processes."""
    import dataclasses

    from attnlab.distributed import ring as lab
    from attnlab.distributed import torchrun as ring_torchrun

    from . import UsageError

    given = {"world": args.world, "seq": args.seq, "heads": args.heads, "kv_heads": args.kv_heads,
             "head_dim": args.head_dim, "batch": args.batch, "layout": args.layout, "dtype": args.dtype,
             "repeats": args.repeats, "pg_timeout_s": args.timeout, "timeout_s": args.time_limit, "seed": args.seed}
    if ring_torchrun.under_torchrun():  # started by torchrun: join its group instead of starting one
        if args.world not in (None, ring_torchrun.world_size()):
            raise UsageError(f"--world {args.world}, but torchrun started {ring_torchrun.world_size()} processes "
                             "(WORLD_SIZE); leave --world out under torchrun")
        given["world"] = ring_torchrun.world_size()
    cfg = dataclasses.replace(lab.RingConfig(), causal=args.causal, backward=args.backward,
                              measure=not args.no_measure, **{k: v for k, v in given.items() if v is not None})
    try:
        cfg.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return cfg


def _run_here(cfg):
    """Start the ranks on this machine, after the time estimate allows it; None when the launch failed (said on
    stderr)."""
    import dataclasses
    import sys
    import time

    from attnlab.distributed import budget as ring_budget
    from attnlab.distributed import launch, servers
    from attnlab.distributed import ring as lab
    from attnlab.report import terminal

    from . import ON_STOP, Stopped, UsageError

    est = ring_budget.estimate(cfg)
    why = ring_budget.refusal(cfg, est)
    if why:
        raise UsageError(why)
    terminal.console.print(f"attnlab ring: {cfg.world} ranks at T={cfg.seq}: estimated {est.describe()}")
    try:  # after the session no process of the run is left, however it ends
        with servers.session(), terminal.status("starting the ranks") as update:  # in a log: a line per step
            t0 = time.monotonic()
            return lab.run(cfg, lambda text: update(f"{text} ({time.monotonic() - t0:.0f} s)"),
                           dataclasses.asdict(est))
    except launch.LaunchError as e:
        if e.by_ctrl_c:  # a rank that Ctrl-C ended is the learner's stop, not a failure
            raise Stopped(ON_STOP["ring"]) from None
        print(f"attnlab ring: failed: {e}", file=sys.stderr)
        return None
