"""Training figures and the live progress bar, drawn from :mod:`attnlab.lab.train` results."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from .plots import _plt, save_figure
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
    return save_figure(fig, path)


@contextmanager
def train_progress(total_steps: int, variants: list[str]):
    """A progress bar over every variant's steps, with loss and tokens/s; yields ``on_step``."""
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
