"""Figures drawn from lab results (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

from attnlab._extras import require


def _plt():
    matplotlib = require("matplotlib")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Write a figure as every figure of attnlab is written, and free it.

    The folder is created; a figure without a layout engine is laid out tight first; it is saved at
    its own dpi, cropped to what it draws (``bbox_inches="tight"``, so no label is cut and no margin
    wasted), whole or not at all (:func:`attnlab.results.files.write_file`); then closed, so a long run
    that draws many figures does not keep them all in memory.
    """
    from attnlab.results.files import write_file

    plt = _plt()
    path = Path(path)
    try:
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        # whole or not at all, like every file attnlab writes; the format from the name, not from NAME.tmp
        return write_file(path, lambda f: fig.savefig(f, format=path.suffix.lstrip(".") or "png", bbox_inches="tight"))
    finally:
        plt.close(fig)


def attention_map(weights, path: str | Path, title: str = "Causal attention weights",
                  labels: list[str] | None = None) -> Path:
    """Heatmap of an (L, S) weight matrix: rows are queries, columns keys."""
    plt = _plt()
    import numpy as np

    w = np.asarray(weights, dtype=float)
    fig, ax = plt.subplots(figsize=(5.2, 4.4), dpi=120)
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(1e-9, float(w.max())))
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(title)
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
    fig.colorbar(im, ax=ax, label="attention weight")
    return save_figure(fig, path)


def scale_demo(result, path: str | Path) -> Path:
    """Mean peak softmax weight against head width for the three scales (a DemoResult)."""
    from attnlab.demo import SCALE_LABELS

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for name, vals in result.peak.items():
        ax.plot(result.widths, vals, marker="o", label=f"scale {SCALE_LABELS[name]}")
    ax.axhline(1.0 / result.scale_T, color="grey", ls=":", lw=1, label=f"uniform (1/{result.scale_T})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("head width d")
    ax.set_ylabel("mean peak attention weight")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Softmax saturation: T = {result.scale_T} tokens, unit-variance q and k")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_figure(fig, path)
