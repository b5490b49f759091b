"""`attnlab explore [NAME ...]`: the lesson's things to try, as experiments that print what they found."""

from __future__ import annotations

from ._args import seed
from ._folder import add_force, add_out, keep_other_run, output_folder


def add_parser(sub):
    p = sub.add_parser("explore", help="run one of the lesson's experiments (no name: list them)",
                       description="Run the lesson's things to try: each prints its finding with the numbers "
                                   "and writes explore-NAME.png and explore-NAME.json. Without a name, list them; "
                                   "'all' runs every one. An experiment that trains (sinks) says beforehand how long "
                                   "it will take and shows its progress.")
    p.add_argument("names", nargs="*", metavar="NAME", help="experiments to run, or 'all'")
    add_out(p)
    p.add_argument("--seed", type=seed, default=0, help="random seed (default: 0)")
    p.add_argument("--preset", choices=["default", "tiny"], default=None,
                   help="sinks only: the models it trains: default (2 layers, 3 heads, 300 steps each: a minute or "
                        "two on 2 CPU cores), tiny (1 layer, 20 steps: seconds)")
    p.add_argument("--resume", action="store_true",
                   help="sinks only: continue a stopped run from its checkpoints in --out/checkpoints")
    add_force(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from attnlab import explore
    from attnlab.report.explore import figure
    from attnlab.report.terminal import console
    from attnlab.results import write_json

    from . import Stopped, UsageError

    if not args.names:
        console.print("[bold]attnlab explore NAME[/]  (or 'all'): the lesson's things to try")
        for e in explore.EXPERIMENTS.values():
            console.print(f"  {e.name:<15} {e.summary}")
        return 0
    unknown = [n for n in args.names if n != "all" and n not in explore.EXPERIMENTS]
    if unknown:
        raise UsageError(f"unknown experiment {unknown[0]!r}; choose one of: {', '.join(explore.EXPERIMENTS)}, all")
    names = list(explore.EXPERIMENTS) if "all" in args.names else list(dict.fromkeys(args.names))
    if (args.preset or args.resume) and not any(explore.get(n).trains for n in names):
        flag = "--preset" if args.preset else "--resume"
        raise UsageError(f"{flag} applies to the experiments that train (sinks), not to {', '.join(names)}")
    out = output_folder(args.out)
    for name in names:  # before any runs: a refusal leaves every file as it was
        keep_other_run(out / f"explore-{name}.json", _settings(args, explore.get(name)), lambda d: d,
                       f"experiment {name}", args.force)
    resuming = _resume_points(out) if args.resume else None
    done: list[str] = []
    try:
        for name in names:
            e = explore.get(name)
            r = _trained(args, out, resuming) if e.trains else e.run(seed=args.seed)
            console.print(f"[bold]{name}[/]: {e.finding(r)}")
            console.print(f"  wrote {figure(name, r, out / f'explore-{name}.png')}")  # each as soon as it is whole
            console.print(f"  wrote {write_json(r, out / f'explore-{name}.json')}")
            done.append(name)
    except (KeyboardInterrupt, Stopped) as e:  # the experiments done are kept; said with how to go on
        kept = (f"{', '.join(f'explore-{n}.json' for n in done)} {'is' if len(done) == 1 else 'are'} kept in {out}; "
                if done else "")
        if isinstance(e, Stopped):  # the training's: where it stopped and how to go on from its checkpoints
            raise Stopped(kept + e.how, e.where) from None
        rest = " ".join(n for n in names if n not in done)
        seed = f" --seed {args.seed}" if args.seed else ""
        raise Stopped(f"{kept}run it again for the rest: attnlab explore {rest} --out {out}{seed}") from None
    return 0


def _settings(args, e) -> dict:
    """What a result of ``e`` in the folder must match to be replaced without --force."""
    return {"seed": args.seed, "preset": args.preset or "default"} if e.trains else {"seed": args.seed}


def _resume_points(out) -> dict:
    """name -> (checkpoint, step or None) of a stopped sinks run; a UsageError when there is none to go on from."""
    from attnlab.explore import sinks
    from attnlab.train import checkpoint

    from . import UsageError

    try:
        return checkpoint.resume_points(out, sinks.KIND, list(sinks.VARIANTS))
    except ValueError as e:
        raise UsageError(str(e)) from None


def _again(args, out) -> str:
    """How to go on after a stop: from the checkpoints it left, or (none yet) from the start."""
    from attnlab.explore import sinks
    from attnlab.train import checkpoint

    flags = (f" --seed {args.seed}" if args.seed else "") + (f" --preset {args.preset}" if args.preset else "")
    if any(checkpoint.path_of(out, sinks.KIND, n).is_file() for n in sinks.VARIANTS):
        return f"go on from where it stopped: attnlab explore sinks --out {out}{flags} --resume"
    return f"nothing was trained yet; start again: attnlab explore sinks --out {out}{flags}"


def _trained(args, out, resuming):
    """The sinks experiment: both models trained with an estimate said first and a progress bar, then measured;
    None when Ctrl-C stopped it (said, with how to go on)."""
    from attnlab.explore import sinks
    from attnlab.report import train as train_report
    from attnlab.report.fmt import fmt_estimate
    from attnlab.report.terminal import console
    from attnlab.results.stop import catch_interrupt
    from attnlab.train import estimate as train_time
    from attnlab.train import train as lab_train

    from . import Stopped, UsageError

    cfg = sinks.config(args.preset or "default", args.seed)
    try:
        try:
            data = lab_train.load_corpus(cfg)
        except ValueError as e:
            raise UsageError(str(e)) from None
        c = data.describe()
        console.print(f"[bold]sinks[/]: the tiny GPT trained twice, without and with a learned sink per head "
                      f"({', '.join(sinks.VARIANTS)} x {cfg.steps} steps; {cfg.n_layer} layers, {cfg.n_head} heads of "
                      f"width {cfg.d_model // cfg.n_head}, T={cfg.block_size}, batch {cfg.batch_size}, impl "
                      f"{cfg.impl}, seed {cfg.seed}; corpus {c['name']}), then where each head's attention goes on "
                      "held-out text")
        if resuming:
            console.print("\n".join(train_report.resume_lines(resuming)))
        choice = train_time.choose_threads(cfg, data, rounds=1, steps=2)
        console.print(f"  threads: {choice.threads}, the faster here now (" + ", ".join(
            f"{n}: {s * 1e3:.0f} ms a step" for n, s in choice.step_s.items()) + ")")
        est = sinks.estimates(cfg, data)
        left = {n: cfg.steps - (step or 0) for n, (_, step) in resuming.items()} if resuming else None
        seconds = sinks.seconds(est, cfg, left)
        console.print(f"  estimate: {fmt_estimate(seconds)} on this machine now (" + ", ".join(
            f"{n}: {e.step_s * 1e3:.0f} ms a step" for n, e in est.items()) + f", {est['plain'].log_s:.1f} s a log; "
            "timed on a few steps before starting)")
        with catch_interrupt() as stop, train_report.train_progress(cfg.steps, list(sinks.VARIANTS)) as on_step:
            r = sinks.run(args.seed, args.preset or "default", out, resume=bool(resuming), data=data,
                          on_step=on_step, stop=stop, estimate_s=seconds)
    except KeyboardInterrupt as e:  # training's says where it stopped and what it saved; before it, nothing was
        said = str(e).removeprefix("stopped").strip() if str(e).startswith("stopped") else ""
        raise Stopped(_again(args, out), said.partition("; ")[0]) from None
    except ValueError as e:  # a checkpoint trained with other settings, or damaged
        raise UsageError(str(e)) from None
    console.print(f"  trained and measured in {r.seconds:.0f} s (estimated {seconds:.0f} s)")
    return r
