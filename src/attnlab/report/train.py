"""Training figures, tables, verdicts and the live progress bar, drawn from :mod:`attnlab.lab.train` results
(and the summaries and predictions of :mod:`attnlab.lab.train_summary`)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from attnlab._extras import require

from .plots import _plt, save
from .terminal import console

COLOURS = {"sqrt": "tab:blue", "none": "tab:red", "inv": "tab:green", "untied": "tab:blue", "tied": "tab:orange"}
LABELS = {"sqrt": "scale 1/sqrt(d)", "none": "no scale", "inv": "scale 1/d", "untied": "separate W_v",
          "tied": "W_v tied to W_k"}
LAYER_STYLES = ["-", "--", ":", "-."]


def figure(result, path: str | Path) -> Path:
    """Three panels: loss (train dashed, validation solid), entropy per layer, gradient through the softmax."""
    plt = _plt()
    cfg = result.config
    fig, (ax_loss, ax_ent, ax_grad) = plt.subplots(1, 3, figsize=(15, 4.4), dpi=110)
    for i, (name, log) in enumerate(result.variants.items()):
        colour = COLOURS.get(name, f"C{i}")
        label = LABELS.get(name, name)
        ax_loss.plot(log.step, log.val_loss, color=colour, label=f"{label} (validation)")
        ax_loss.plot(log.step, log.train_loss, color=colour, ls="--", alpha=0.6, label=f"{label} (train)")
        n_layer = len(log.entropy[0])
        for layer in range(n_layer):
            ls = LAYER_STYLES[layer % len(LAYER_STYLES)]
            ax_ent.plot(log.step, [e[layer] for e in log.entropy], color=colour, ls=ls,
                        label=f"{label}, layer {layer}" if n_layer > 1 else label)
            ax_grad.plot(log.step, [g[layer] for g in log.score_grad_norm], color=colour, ls=ls,
                         label=f"{label}, layer {layer}" if n_layer > 1 else label)
    ax_loss.set(xlabel="step", ylabel="cross-entropy (nats / character)", title="Loss")
    early = [log.val_loss[min(1, len(log.val_loss) - 1)] for log in result.variants.values()]
    ax_loss.set_ylim(top=min(ax_loss.get_ylim()[1], max(early) + 0.3))  # the first log (~log V) would squash the rest
    ax_ent.axhline(cfg["uniform_entropy"], color="grey", lw=0.8, ls=":")
    ax_ent.text(0, cfg["uniform_entropy"], " uniform attention", va="bottom", fontsize=8, color="grey")
    ax_ent.set(xlabel="step", ylabel="softmax entropy (nats)", title="Attention entropy per layer", ylim=(0, None))
    ax_grad.set(xlabel="step", ylabel="||d loss / d scores||", title="Gradient through the softmax, per layer",
                yscale="log")
    for ax in (ax_loss, ax_ent, ax_grad):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{cfg['n_layer']} layers, d_model={cfg['d_model']}, {cfg['n_head']} heads of width "
                 f"d={cfg['head_dim']}, T={cfg['block_size']}, batch {cfg['batch_size']}, seed {cfg['seed']}, "
                 f"corpus: {cfg['corpus_info']['name']}"
                 + (f"; {cfg['parallel']}" if cfg.get("data_parallel", 1) * cfg.get("context_parallel", 1) > 1
                    else ""), fontsize=10)
    fig.tight_layout()
    return save(fig, path)


@contextmanager
def train_progress(total_steps: int, variants: list[str]):
    """A progress bar over every variant's steps, with loss and tokens/s; yields ``on_step``."""
    require("rich")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} tokens/s"), TimeElapsedColumn()]
    with Progress(*cols, console=console, transient=True) as p:
        task = p.add_task("train", total=total_steps * len(variants), loss="-", rate="-")
        offset = {name: i * total_steps for i, name in enumerate(variants)}

        def on_step(name: str, step: int, steps: int, loss: float, tokens_per_s: float) -> None:
            p.update(task, completed=offset.get(name, 0) + step, description=f"train {name}",
                     loss=f"{loss:.3f}", rate=f"{tokens_per_s:,.0f}")

        yield on_step


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
    from attnlab.lab.train_summary import destabilised

    lines = []
    if preds:
        verdict = "[green]measured[/]" if destabilised(preds) else "[red]not measured at these settings[/]"
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
    from attnlab.lab import train_summary

    summaries, preds = train_summary.summarise(result)
    console.print(table(result, summaries))
    for line in verdict_lines(result, summaries, preds, train_summary.tie_kv(summaries)):
        console.print(line)
