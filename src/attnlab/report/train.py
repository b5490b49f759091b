"""Training figures, tables, verdicts and the live progress bar, drawn from :mod:`attnlab.train.train` results
(and the summaries and predictions of :mod:`attnlab.train.summary`)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from attnlab._extras import require

from .plots import _plt, save_figure
from .terminal import console

COLOURS = {"sqrt": "tab:blue", "none": "tab:red", "inv": "tab:green", "untied": "tab:blue", "tied": "tab:orange"}
LABELS = {"sqrt": "scale 1/sqrt(d)", "none": "no scale", "inv": "scale 1/d", "untied": "separate W_v",
          "tied": "W_v tied to W_k"}
LAYER_STYLES = ["-", "--", ":", "-."]


PANELS = ("loss", "entropy", "grad")


def figure(result, path: str | Path, *, panels: tuple[str, ...] = PANELS, size: tuple[float, float] | None = None,
           dpi: int = 110, train_loss: bool = True, zoom: bool = True) -> Path:
    """Loss (train dashed, validation solid), entropy per layer, gradient through the softmax: the ``panels`` asked
    for, side by side, ``size`` inches (5 wide per panel unless given). A panel the result has no data for is left
    out, so a result written without gradient norms still draws. ``train_loss=False`` draws validation only;
    ``zoom`` cuts the loss axis just above the second log, so the first (about log V) does not squash the rest."""
    plt = _plt()
    logs = result.variants
    have = {"loss": any(v.val_loss for v in logs.values()), "entropy": any(v.entropy for v in logs.values()),
            "grad": any(v.score_grad_norm for v in logs.values())}
    shown = [p for p in panels if have[p]] or ["loss"]
    fig, axes = plt.subplots(1, len(shown), figsize=size or (5 * len(shown), 4.4), dpi=dpi, squeeze=False)
    for name, ax in zip(shown, axes[0], strict=True):
        if name == "loss":
            _loss(ax, result, train_loss, zoom)
        else:
            {"entropy": _entropy, "grad": _grad}[name](ax, result)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)  # under the
        # axes, not over the curves
    title = _title(result.config)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def _lines(result):
    """(colour, label, log) per variant."""
    return [(COLOURS.get(n, f"C{i}"), LABELS.get(n, n), log) for i, (n, log) in enumerate(result.variants.items())]


def _per_layer(ax, result, series) -> None:
    """One line per variant and layer of ``series(log)`` ([logged step][layer]), styled by layer."""
    for colour, label, log in _lines(result):
        rows = series(log)
        if not rows or len(rows) != len(log.step):
            continue
        n_layer = len(rows[0])
        for layer in range(n_layer):
            ax.plot(log.step, [x[layer] for x in rows], color=colour, ls=LAYER_STYLES[layer % len(LAYER_STYLES)],
                    label=f"{label}, layer {layer}" if n_layer > 1 else label)


def _loss(ax, result, train_loss: bool, zoom: bool) -> None:
    for colour, label, log in _lines(result):
        ax.plot(log.step, log.val_loss, color=colour, label=f"{label} (validation)" if train_loss else label)
        if train_loss and len(log.train_loss) == len(log.step):
            ax.plot(log.step, log.train_loss, color=colour, ls="--", alpha=0.6, label=f"{label} (train)")
    ax.set(xlabel="step", ylabel="cross-entropy (nats / character)", title="Loss" if train_loss else "Validation loss")
    early = [log.val_loss[min(1, len(log.val_loss) - 1)] for log in result.variants.values() if log.val_loss]
    if zoom and early:
        ax.set_ylim(top=min(ax.get_ylim()[1], max(early) + 0.3))


def _entropy(ax, result) -> None:
    _per_layer(ax, result, lambda log: log.entropy)
    uniform = result.config.get("uniform_entropy")
    if uniform is not None:
        # named in the legend, not written on the axes: 1/d's curves start right on this line
        ax.axhline(uniform, color="grey", lw=0.8, ls=":", label=f"uniform attention ({uniform:.2f})")
    ax.set(xlabel="step", ylabel="softmax entropy (nats)", title="Attention entropy per layer", ylim=(0, None))


def _grad(ax, result) -> None:
    _per_layer(ax, result, lambda log: log.score_grad_norm)
    ax.set(xlabel="step", ylabel="||d loss / d scores||", title="Gradient through the softmax, per layer",
           yscale="log")


def _title(cfg: dict) -> str:
    """The model and the run in one line (empty for a config that does not say)."""
    if "n_layer" not in cfg:
        return ""
    parallel = f"; {cfg['parallel']}" if cfg.get("data_parallel", 1) * cfg.get("context_parallel", 1) > 1 else ""
    layers = f"{cfg['n_layer']} layer{'s' if cfg['n_layer'] != 1 else ''}"
    return (f"{layers}, d_model={cfg['d_model']}, {cfg['n_head']} heads of width d={cfg['head_dim']}, "
            f"T={cfg['block_size']}, batch {cfg['batch_size']}, seed {cfg['seed']}, "
            f"corpus: {cfg['corpus_info']['name']}{parallel}")


@contextmanager
def train_progress(total_steps: int, variants: list[str], lines: int = 10):
    """Progress over every variant's steps, with loss, tokens/s and the time left; yields ``on_step``.

    On a terminal a bar; elsewhere (a log file, a pipe) a line ``lines`` times per variant, so a log shows
    how far the run got and how long it still needs."""
    import time

    from .fmt import fmt_estimate

    require("rich")
    offset = {name: i * total_steps for i, name in enumerate(variants)}
    total = total_steps * len(variants)
    if not console.is_terminal:
        t0, every = time.perf_counter(), max(1, total_steps // lines)

        def on_line(name: str, step: int, steps: int, loss: float, tokens_per_s: float) -> None:
            if step % every and step != steps:
                return
            done = offset.get(name, 0) + step
            spent = time.perf_counter() - t0
            left = spent / max(1, done - offset.get(variants[0], 0)) * (total - done) if done < total else 0.0
            console.print(f"  train {name}: step {step}/{steps}, loss {loss:.3f}, {tokens_per_s:,.0f} tokens/s, "
                          f"{spent:.0f} s so far" + (f", {fmt_estimate(left)} left" if done < total else ""))

        yield on_line
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} tokens/s"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn()]
    with Progress(*cols, console=console, transient=True) as p:
        task = p.add_task("train", total=total, loss="-", rate="-")

        def on_step(name: str, step: int, steps: int, loss: float, tokens_per_s: float) -> None:
            p.update(task, completed=offset.get(name, 0) + step, description=f"train {name}",
                     loss=f"{loss:.3f}", rate=f"{tokens_per_s:,.0f}")

        yield on_step


def estimate_line(est, seconds: float) -> str:
    """What the run will take, said before it starts (``est``: :class:`attnlab.train.estimate.Estimate`)."""
    from .fmt import fmt_estimate

    return (f"  estimate: {fmt_estimate(seconds)} on this machine now ({est.step_s * 1e3:.0f} ms a step and "
            f"{est.log_s:.1f} s a log, timed on a few steps before starting)")


def circuit_lines(result) -> list[str]:
    """The heads each variant grew, measured on repeated random sequences (:mod:`attnlab.train.circuits`)."""
    lines = []
    for name, log in result.variants.items():
        c = log.circuits
        if c is None:
            continue
        p, i = c.best("previous"), c.best("induction")
        lines.append(f"  {name:<5} heads on {c.describe()}: "
                     f"previous-token layer {p.layer} head {p.head} {p.previous:.2f} "
                     f"({'[green]found[/]' if c.previous_found else '[red]none[/]'}, rule >= {c.previous_share}); "
                     f"induction layer {i.layer} head {i.head} {i.induction:.2f} (lowest at one length "
                     f"{c.lowest():.2f}) "
                     f"({'[green]found[/]' if c.induction_found else '[red]none[/]'}, rule >= {c.induction_share}); "
                     f"loss {c.loss_first:.2f} on the first copy, {c.loss_repeat:.2f} on the repeat "
                     f"({'[green]copies[/]' if c.copies else '[red]does not copy[/]'}, rule <= {c.loss_ratio} of the "
                     "first)")
    return ["[bold]Heads with a job[/] (measured on the final models):"] + lines if lines else []


def header_lines(cfg, kind: str, names: list[str], corpus: dict, grid=None) -> list[str]:
    """What is about to be trained: the variants and model, the corpus, and (across ranks) each rank's share."""
    impl = "ring" if grid is not None and grid.cp > 1 else cfg.impl
    lines = [f"[bold]attnlab train[/] ({kind}): {', '.join(names)} x {cfg.steps} steps; {cfg.n_layer} layers, "
             f"d_model={cfg.d_model}, {cfg.n_head} heads of width d={cfg.d_model // cfg.n_head}, T={cfg.block_size}, "
             f"batch {cfg.batch_size}, impl {impl}, seed {cfg.seed}",
             f"  corpus: {corpus['name']} ({corpus['train_chars']:,} training characters in {corpus['train_files']} "
             f"files, {corpus['val_chars']:,} validation in {corpus['val_files']}; vocabulary {corpus['vocab_size']})"]
    if grid is not None:
        lines.append(f"  ranks: {grid.describe()}; each holds {cfg.batch_size // grid.dp} sequences x "
                     f"{cfg.block_size // grid.cp} tokens of every batch")
    return lines


def resume_lines(points: dict) -> list[str]:
    """Where each variant of a resumed run continues from (``points``: name -> (checkpoint, step or None))."""
    return [f"  resuming {name} from step {step} ({path})" if step is not None else
            f"  {name}: no checkpoint in {path.parent}, starts at step 0" for name, (path, step) in points.items()]


def _fmt(xs) -> str:
    return "[" + ", ".join(f"{x:.2f}" for x in xs) + "]"


def table(result, summaries: dict):
    """One row per variant: entropy, peak weight, loss and gradients at the start and the end, speed."""
    from rich.table import Table

    t = Table(title=f"per variant (entropy in nats per layer; uniform attention = "
                    f"{result.config['uniform_entropy']:.2f})")
    for col in ("variant", "entropy start -> end", "peak weight start -> end", "val loss start -> end",
                "grad norm start -> end", "W_q,W_k grad start -> end", "score grad start -> end", "tokens/s",
                "time"):
        t.add_column(col)
    for s in summaries.values():
        diverged = f" (diverged at {s.diverged_at})" if s.diverged_at is not None else ""
        t.add_row(s.name, f"{_fmt(s.entropy_start)} -> {_fmt(s.entropy_end)}",
                  f"{_fmt(s.peak_start)} -> {_fmt(s.peak_end)}", f"{s.val_start:.3f} -> {s.val_end:.3f}{diverged}",
                  f"{s.grad_norm_start:.3g} -> {s.grad_norm_end:.3g}", f"{s.qk_grad_start:.3g} -> {s.qk_grad_end:.3g}",
                  f"{s.score_grad_start:.3g} -> {s.score_grad_end:.3g}", f"{s.tokens_per_s:,.0f}", f"{s.seconds:.0f} s")
    return t


def verdict_lines(result, summaries: dict, preds: list, tie=None) -> list[str]:
    """The lesson's predictions as lab checked them: the scale checklist, and the tie-kv claim (``tie``)."""
    from attnlab.train.summary import destabilised

    lines = []
    if preds:
        verdict = ("[green]measured[/]" if destabilised(preds) else
                   "[red]measured, and it did not hold at these settings[/]")
        lines.append(f"[bold]Removing the 1/sqrt(d) scale visibly destabilised training[/]: {verdict}")
        for s in summaries.values():
            lines.append(f"  {s.name:<5} entropy {_fmt(s.entropy_start)} -> {_fmt(s.entropy_end)} nats, "
                         f"final val loss {s.val_end:.3f}")
        for pr in preds:
            mark = "[green]holds[/]" if pr.holds else "[red]does not hold[/]"
            lines.append(f"  prediction: {pr.claim}: {mark} -- {pr.evidence}")
    if tie is not None:
        u, tied = summaries["untied"], summaries["tied"]
        lines.append(f"[bold]Tying the value projection to the key projection[/]: final validation loss "
                     f"{tied.val_end:.3f} tied vs {u.val_end:.3f} separate ({tied.val_end - u.val_end:+.3f}); "
                     f"parameters {result.variants['tied'].params:,} vs {result.variants['untied'].params:,}")
        verdict = "[green]holds[/]" if tie.holds else "[red]does not hold[/]"
        lines.append(f"  the lesson's claim \"{tie.claim}\": {verdict} at these settings ({tie.evidence})")
    return lines


def show(result, console) -> None:
    """Everything `attnlab train` prints after training: the table per variant, then the verdicts."""
    from attnlab.train import summary as train_summary

    summaries, preds = train_summary.summarise(result)
    console.print(table(result, summaries))
    for line in verdict_lines(result, summaries, preds, train_summary.tie_kv(summaries)) + circuit_lines(result):
        console.print(line)
