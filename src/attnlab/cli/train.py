"""`attnlab train`: train a tiny GPT with and without the 1/sqrt(d) scale (or with K and V tied)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ._args import positive, seconds, seed, single_process_form
from ._folder import add_force, add_out, keep_other_run, output_folder, refuse_other_settings


def add_parser(sub):
    p = sub.add_parser("train", help="train a tiny GPT: the 1/sqrt(d) ablation with per-layer softmax entropy",
                       description="Train the same tiny GPT (same seed, initial weights and batches) with the "
                                   "attention scale 1/sqrt(d), 1 and 1/d, and measure loss, gradient norms and "
                                   "softmax entropy per layer. Writes train.png, train.json and checkpoints.")
    p.add_argument("--preset", choices=["tiny", "default", "large"], default="default",
                   help="model and run size: tiny (1 layer, seconds), default (2 layers, d_model 96, 3 heads, "
                        "800 steps with repeated segments mixed in: about a minute per variant on 2 idle CPU cores), "
                        "large (4 layers, d_model 256, T 128, 1000 steps: hours on 2 "
                        "CPU cores, meant for --device cuda)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare", action="store_true", help="train sqrt, none and inv side by side (the default)")
    what.add_argument("--scale", choices=["sqrt", "none", "inv"], help="train one scale only")
    what.add_argument("--ablation", choices=["tie-kv"],
                      help="tie-kv: the value projection tied to the key projection, against separate ones")
    p.add_argument("--steps", type=positive, help="optimizer steps per variant (default: the preset's)")
    p.add_argument("--eval-every", type=positive, help="log and checkpoint every N steps (default: the preset's)")
    p.add_argument("--impl", default=None, help="form of attention to train with (default: sdpa)")
    p.add_argument("--corpus", default=None, help="a UTF-8 text file (default: Python's standard library source)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--seed", type=seed, default=None, help="random seed (default: 0)")
    add_out(p)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out/checkpoints")
    add_force(p)
    p.add_argument("--procs", type=positive, metavar="N",
                   help="train in N local CPU processes (gloo on 127.0.0.1) under DistributedDataParallel, each "
                        "with its share of the batch; under torchrun leave it out (torchrun says how many)")
    p.add_argument("--context-parallel", type=positive, metavar="N",
                   help="split every sequence across N ranks (zigzag layout, ring attention); with more ranks "
                        "than N, the rest is data parallel on a grid (ranks / N) x N")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS", default=120.0,
                   help="across ranks: a rank that stops answering ends the run after this (default: 120)")
    p.set_defaults(run=run)



def _grid(args, cfg) -> tuple[int, int]:
    """(ranks, context-parallel ranks) asked for, checked against the batch and the sequence length."""
    from attnlab.distributed import parallel

    from . import UsageError

    cp = args.context_parallel or 1
    if parallel.under_torchrun():
        world = parallel.world_size()
        if args.procs not in (None, world):
            raise UsageError(f"--procs {args.procs}, but torchrun started {world} processes (WORLD_SIZE); leave "
                             "--procs out under torchrun")
    else:
        world = args.procs or cp
        if world > 1 and cfg.device != "cpu":
            raise UsageError("--procs starts CPU processes (gloo); on GPUs start one process per GPU with torchrun "
                             "(see the README) and pass --device cuda")
    if world % cp:
        raise UsageError(f"--context-parallel {cp} does not divide the {world} ranks; use a divisor of {world}")
    if cp > 1 and args.impl is not None:
        raise UsageError(f"--context-parallel trains with ring attention across the ranks; --impl {args.impl} "
                         "does not apply")
    try:
        parallel.Grid(0, world, cp).check(cfg.batch_size, cfg.block_size)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return world, cp


def _parallel(args, cfg, world: int, cp: int) -> int:
    """Train on ``world`` ranks: join torchrun's group, or start them here through the local launcher."""
    import os

    from attnlab.distributed import launch, parallel, servers
    from attnlab.results.stop import catch_interrupt

    from . import STOPPED, Stopped, UsageError

    if parallel.under_torchrun():
        try:
            grid = parallel.join(cp, cfg.device, args.timeout)
        except (RuntimeError, ValueError) as e:
            raise UsageError(f"could not join torchrun's process group: {type(e).__name__}: {_first_line(e)}") from None
        code = _rank_run(args, grid)  # on a failure the process ends without waiting on peers that may be gone
        import torch.distributed as dist

        dist.destroy_process_group()
        return code
    threads = max(1, (os.cpu_count() or 1) // world)
    # A first Ctrl-C reaches every rank: they save at the same step and stop; wait for them. After the session no
    # process of the run is left, however it ends.
    with servers.session(), catch_interrupt():
        outcomes = launch.launch(_rank, world, (args, cp), timeout_s=30 * 24 * 3600.0, pg_timeout_s=args.timeout,
                                 threads=threads, show_rank0=True)
    try:
        code = max(launch.results(outcomes))
    except launch.LaunchError as e:
        if e.by_ctrl_c:  # a rank that Ctrl-C ended is the learner's stop, not a failure
            raise Stopped(_going_on(args, *_what(args))) from None
        said = {(o.raised, o.message, o.error) for o in e.outcomes}
        if len(said) == 1 and e.first.error is not None:  # every rank refused the same thing (a checkpoint differs)
            raised, message, error = said.pop()
            raise UsageError(error if raised is None else message if raised == "UsageError" else
                             f"{raised}: {message}") from None
        if e.first.raised == "CannotWrite":  # rank 0 could not write a checkpoint (a full disk)
            raise UsageError(e.first.message) from None
        raise UsageError(f"training across {world} processes failed: {e}") from None
    if code == STOPPED:  # the ranks saved at the same step and stopped
        raise Stopped(_going_on(args, *_what(args)), _where(cfg, *_what(args)))
    return code


def on_stop(args) -> str:
    """What a training that Ctrl-C stopped before it trained (or a second Ctrl-C) kept, and how to go on."""
    return _going_on(args, *_what(args))


def _what(args) -> tuple[str, list[str], Path]:
    """(the ablation's kind, its variants, the output folder) the flags name."""
    from attnlab.train import train

    kind = "tie-kv" if args.ablation == "tie-kv" else "scale"
    names = [args.scale] if args.scale else list(train.SCALE_VARIANTS if kind == "scale" else train.TIE_KV_VARIANTS)
    return kind, names, Path(args.out)


def _going_on(args, kind: str, names: list[str], out: Path) -> str:
    """What a stopped training kept, and how to go on: --resume from its checkpoints, or again from the start."""
    from attnlab.train import checkpoint

    if not any(checkpoint.path_of(out, kind, n).is_file() for n in names):
        return "no checkpoint was written yet: run it again to train from the start"
    again = "run it again with the same flags" + ("" if args.resume else " and --resume")
    return f"the checkpoints are kept in {out / 'checkpoints'}: {again} to train on from them"


def _where(cfg, kind: str, names: list[str], out: Path) -> str:
    """Where the ranks stopped, as their checkpoints say ("at step 7 of sqrt"); empty where none says."""
    from attnlab.train import checkpoint

    try:
        points = checkpoint.resume_points(out, kind, names)
    except ValueError:
        return ""
    at = [(n, step) for n, (_, step) in points.items() if step is not None and step < cfg.steps]
    return f"at step {at[0][1]} of {at[0][0]}" if at else ""


def _rank(rank: int, world: int, args, cp: int) -> int:
    """One rank started by the local launcher (its process group is already joined)."""
    from attnlab.distributed import parallel

    return _rank_run(args, parallel.grid(cp))


def _rank_run(args, grid) -> int:
    """The training in one rank; rank 0 alone prints and writes."""
    from attnlab.report.terminal import console

    from . import UsageError

    console.quiet = not grid.writer
    try:
        return run(args, grid)
    except RuntimeError as e:  # a peer died or stopped answering (torch.distributed.DistBackendError is one)
        from attnlab.distributed.launch import LOST_PEER

        raise UsageError(f"rank {grid.rank} of {grid.world} {LOST_PEER} (it died, or did not answer within "
                         f"--timeout {args.timeout:g} s): {_first_line(e)}") from None


def _first_line(e: BaseException) -> str:
    """The gist of a torch.distributed error: its first sentence, without gloo's source path."""
    import re

    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", str(e).strip())
    return text.splitlines()[0].split(". ")[0] if text else type(e).__name__


def _config(args):
    from attnlab.train.train import PRESETS

    from . import UsageError

    given = {"steps": args.steps, "eval_every": args.eval_every, "impl": args.impl, "seed": args.seed,
             "corpus": args.corpus, "device": args.device}
    changes = {k: v for k, v in given.items() if v is not None}
    if args.impl is not None:
        single_process_form(args.impl, "training here", args.device)
    if args.device not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda, got {args.device!r}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available")
    if args.corpus is not None and not Path(args.corpus).is_file():
        raise UsageError(f"--corpus {args.corpus or repr(args.corpus)}: no such file" +
                         (" (it is a folder)" if args.corpus and Path(args.corpus).is_dir() else ""))
    try:
        return dataclasses.replace(PRESETS[args.preset], **changes)
    except ValueError as e:
        raise UsageError(str(e)) from None


def run(args, grid=None) -> int:
    """The command; across ranks, every rank runs it with its ``grid`` and rank 0 alone prints and writes."""
    from attnlab.report import train as report
    from attnlab.report.terminal import console
    from attnlab.train import checkpoint, train

    from . import STOPPED, Stopped, UsageError

    cfg = _config(args)
    kind = "tie-kv" if args.ablation == "tie-kv" else "scale"
    variants = [args.scale] if args.scale else None
    out = output_folder(args.out)  # checked before any rank starts
    names = variants or list(train.SCALE_VARIANTS if kind == "scale" else train.TIE_KV_VARIANTS)
    try:  # before the corpus: a missing checkpoint is quick to find
        resuming = report.resume_lines(checkpoint.resume_points(out, kind, names)) if args.resume else []
    except ValueError as e:
        raise UsageError(str(e)) from None
    if grid is None:
        world, cp = _grid(args, cfg)
        if not args.resume:  # --resume checks the checkpoints' settings itself
            _keep_other_runs(args, cfg, kind, names, out, world, cp)
        if world > 1:
            return _parallel(args, cfg, world, cp)
    try:
        data = train.load_corpus(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    for line in report.header_lines(cfg, kind, names, data.describe(), grid) + resuming:
        console.print(line)
    if grid is None:  # across ranks every step waits for the slowest rank: a one-process timing would mislead
        from attnlab.train import estimate as train_time

        twins = {n: p for n in names if (p := train.reusable(cfg, kind, n, out, data.vocab_size))}
        for n, p in twins.items():
            console.print(f"  {n}: the same run as {p} (the same model, settings, seed and data): reused, not trained")
        if cfg.device == "cpu":  # the faster thread count now; the run goes on choosing from its own steps
            choice = train_time.choose_threads(cfg, data, rounds=1, steps=2)
            console.print(f"  threads: {choice.threads}, the faster here now (" + ", ".join(
                f"{n}: {s * 1e3:.0f} ms a step" for n, s in choice.step_s.items()) + "); chosen again at every log")
        est = train_time.estimate(cfg, data)
        left = {n: cfg.steps - (step or 0) for n, (_, step) in
                (checkpoint.resume_points(out, kind, names) if args.resume else {}).items()}
        steps = sum(left.get(n, cfg.steps) for n in names if n not in twins)
        console.print(report.estimate_line(est, est.seconds(steps, cfg.eval_every)))
    try:
        with report.train_progress(cfg.steps, names) as on_step:
            result = train.run(cfg, kind, variants, out, resume=args.resume, data=data, on_step=on_step, grid=grid,
                               threads=(1, 2) if grid is None and cfg.device == "cpu" else None)
    except KeyboardInterrupt:  # where it stopped and what it kept, from the checkpoints it saved
        if grid is not None:  # a rank: the command that started the ranks says it, once
            return STOPPED
        raise Stopped(_going_on(args, kind, names, out), _where(cfg, kind, names, out)) from None
    except ValueError as e:
        raise UsageError(str(e)) from None
    if grid is not None and not grid.writer:
        return 0
    report.show(result, console)
    _write(result, out, kind, names[0])
    return 0


def _keep_other_runs(args, cfg, kind: str, names: list[str], out: Path, world: int, cp: int) -> None:
    """A UsageError when ``out`` holds the results or checkpoints of a run with other settings (``--force``: none).

    The lesson page and ``sample`` read the folder's train.json and checkpoints by their names, so a run with other
    settings (a tiny preset, fewer steps, another variant set) must not replace them without a word."""
    from attnlab.train import checkpoint

    if args.force:
        return
    settings = dataclasses.asdict(cfg)
    now = {**settings, "variants": names, "data_parallel": world // cp, "context_parallel": cp}

    def resumable(saved: dict) -> str:  # only fewer steps: --resume goes on from where that run stopped
        other = {k for k, v in settings.items() if saved.get(k) != v}
        fewer = other == {"steps"} and isinstance(saved.get("steps"), int) and saved["steps"] < cfg.steps
        return "add --resume to train on from where it stopped, " if fewer else ""

    stem = "train" if kind == "scale" else "tie_kv"
    keep_other_run(out / f"{stem}.json", now, lambda d: {**d["config"], "variants": list(d["config"]["variants"])},
                   "a training run", False, resumable)
    for name in names:  # an interrupted run has checkpoints and no JSON yet
        path = checkpoint.path_of(out, kind, name)
        try:
            saved = checkpoint.load(path)["train_config"] if path.is_file() else None
        except (ValueError, KeyError, TypeError):  # a damaged file holds no run to keep
            saved = None
        if isinstance(saved, dict):
            refuse_other_settings(path, saved, settings, "a checkpoint", resumable)


def _write(result, out: Path, kind: str, first: str) -> None:
    """The figure and the JSON, and where the checkpoints are."""
    from attnlab.report import train as report
    from attnlab.report.terminal import console
    from attnlab.results import write_json
    from attnlab.train import checkpoint

    stem = "train" if kind == "scale" else "tie_kv"
    console.print(f"  wrote {report.figure(result, out / f'{stem}.png')}")  # each said as soon as it is whole
    console.print(f"  wrote {write_json(result, out / f'{stem}.json')}")
    first_path = checkpoint.path_of(out, kind, first)
    console.print(f"  checkpoints in {first_path.parent} (try: attnlab sample --ckpt {first_path})")
