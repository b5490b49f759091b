"""`attnlab train`: train a tiny GPT with and without the 1/sqrt(d) scale (or with K and V tied)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ._folder import add_out, output_folder, seed, single_process_form
from .sample import _positive


def add_parser(sub):
    p = sub.add_parser("train", help="train a tiny GPT: the 1/sqrt(d) ablation with per-layer softmax entropy",
                       description="Train the same tiny GPT (same seed, initial weights and batches) with the "
                                   "attention scale 1/sqrt(d), 1 and 1/d, and measure loss, gradient norms and "
                                   "softmax entropy per layer. Writes train.png, train.json and checkpoints.")
    p.add_argument("--preset", choices=["tiny", "default", "large"], default="default",
                   help="model and run size: tiny (1 layer, seconds), default (2 layers, d_model 128, 150 steps: "
                        "about 3 min on 2 CPU cores), large (4 layers, d_model 256, T 128, 1000 steps: hours on 2 "
                        "CPU cores, meant for --device cuda)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare", action="store_true", help="train sqrt, none and inv side by side (the default)")
    what.add_argument("--scale", choices=["sqrt", "none", "inv"], help="train one scale only")
    what.add_argument("--ablation", choices=["tie-kv"],
                      help="tie-kv: the value projection tied to the key projection, against separate ones")
    p.add_argument("--steps", type=_positive, help="optimizer steps per variant (default: the preset's)")
    p.add_argument("--eval-every", type=_positive, help="log and checkpoint every N steps (default: the preset's)")
    p.add_argument("--impl", default=None, help="form of attention to train with (default: sdpa)")
    p.add_argument("--corpus", default=None, help="a UTF-8 text file (default: Python's standard library source)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--seed", type=seed, default=None, help="random seed (default: 0)")
    add_out(p)
    p.add_argument("--resume", action="store_true", help="continue from the checkpoints in --out/checkpoints")
    p.set_defaults(run=run)


def _config(args):
    from attnlab.lab.train import PRESETS

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
        raise UsageError(f"--corpus {args.corpus}: no such file")
    try:
        return dataclasses.replace(PRESETS[args.preset], **changes)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _fmt(xs) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"


def run(args) -> int:
    from rich.table import Table

    from attnlab.lab import train, train_summary
    from attnlab.lab.results import write_json
    from attnlab.report import train as report
    from attnlab.report.terminal import console

    from . import UsageError

    cfg = _config(args)
    kind = "tie-kv" if args.ablation == "tie-kv" else "scale"
    variants = [args.scale] if args.scale else None
    out = output_folder(args.out)
    try:
        data = train.load_corpus(cfg)
    except ValueError as e:
        raise UsageError(str(e)) from None
    names = variants or list(train.SCALE_VARIANTS if kind == "scale" else train.TIE_KV_VARIANTS)
    d = cfg.d_model // cfg.n_head
    info = data.describe()
    console.print(f"[bold]attnlab train[/] ({kind}): {', '.join(names)} x {cfg.steps} steps; {cfg.n_layer} layers, "
                  f"d_model={cfg.d_model}, {cfg.n_head} heads of width d={d}, T={cfg.block_size}, batch "
                  f"{cfg.batch_size}, impl {cfg.impl}, seed {cfg.seed}")
    console.print(f"  corpus: {info['name']} ({info['train_chars']:,} training characters in {info['train_files']} "
                  f"files, {info['val_chars']:,} validation in {info['val_files']}; vocabulary {info['vocab_size']})")
    try:
        with report.train_progress(cfg.steps, names) as on_step:
            result = train.run(cfg, kind, variants, out, resume=args.resume, data=data, on_step=on_step)
    except KeyboardInterrupt as e:
        console.print(f"[yellow]interrupted:[/] {e or 'stopped'}. Continue with the same flags and --resume.")
        return 130
    except ValueError as e:
        raise UsageError(str(e)) from None

    summaries, preds = train_summary.summarise(result)
    uniform = result.config["uniform_entropy"]
    t = Table(title=f"per variant (entropy in nats per layer; uniform attention = {uniform:.2f})")
    for col in ("variant", "entropy start -> end", "peak weight start -> end", "val loss start -> end",
                "grad norm start -> end", "W_q,W_k grad start -> end", "score grad start -> end", "tokens/s",
                "time"):
        t.add_column(col)
    for s in summaries.values():
        t.add_row(s.name, f"{_fmt(s.entropy_start)} -> {_fmt(s.entropy_end)}",
                  f"{_fmt(s.peak_start)} -> {_fmt(s.peak_end)}",
                  f"{s.val_start:.3f} -> {s.val_end:.3f}" + (f" (diverged at {s.diverged_at})" if s.diverged_at
                                                             is not None else ""),
                  f"{s.grad_norm_start:.3g} -> {s.grad_norm_end:.3g}", f"{s.qk_grad_start:.3g} -> {s.qk_grad_end:.3g}",
                  f"{s.score_grad_start:.3g} -> {s.score_grad_end:.3g}",
                  f"{s.tokens_per_s:,.0f}", f"{s.seconds:.0f} s")
    console.print(t)
    if preds:
        held = train_summary.destabilised(preds)
        verdict = "[green]measured[/]" if held else "[red]not measured at these settings[/]"
        console.print(f"[bold]Removing the 1/sqrt(d) scale visibly destabilised training[/]: {verdict}")
        for name in summaries:
            s = summaries[name]
            console.print(f"  {name:<5} entropy {_fmt(s.entropy_start)} -> {_fmt(s.entropy_end)} nats, "
                          f"final val loss {s.val_end:.3f}")
        for pr in preds:
            mark = "[green]holds[/]" if pr.holds else "[red]does not hold[/]"
            console.print(f"  prediction: {pr.claim}: {mark} -- {pr.evidence}")
    if kind == "tie-kv":
        u, tied = summaries["untied"], summaries["tied"]
        gap = tied.val_end - u.val_end
        verdict = "[green]holds[/]" if gap > 0.02 else "[red]does not hold[/]"
        console.print(f"[bold]Tying the value projection to the key projection[/]: final validation loss "
                      f"{tied.val_end:.3f} tied vs {u.val_end:.3f} separate ({gap:+.3f}); parameters "
                      f"{result.variants['tied'].params:,} vs {result.variants['untied'].params:,}")
        console.print(f"  the lesson's claim \"tying them measurably reduces capability\": {verdict} at these settings "
                      f"(rule: tied loss above separate by more than 0.02, one seed)")
    stem = "train" if kind == "scale" else "tie_kv"
    files = [report.figure(result, out / f"{stem}.png"), write_json(result, out / f"{stem}.json")]
    for f in files:
        console.print(f"  wrote {f}")
    console.print(f"  checkpoints in {out / 'checkpoints'} (try: attnlab sample --ckpt "
                  f"{out / 'checkpoints' / f'{kind}-{names[0]}.pt'})")
    return 0

