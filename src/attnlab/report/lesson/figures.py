"""Figures the lesson page draws itself when a command's own PNG is not beside its JSON."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

from attnlab.report import explore as explore_figs
from attnlab.report import plots


def _png(draw) -> bytes:
    """Run ``draw(path)`` into a temporary file and return the PNG bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.png"
        draw(path)
        return path.read_bytes()


def demo_map(data: dict) -> bytes:
    return _png(lambda f: plots.attention_map(data["map_weights"], f, title="Causal attention weights (demo)"))


def demo_scale(data: dict) -> bytes:
    ns = SimpleNamespace(peak=data["peak"], widths=data["widths"], scale_T=data["scale_T"])
    return _png(lambda f: plots.scale_demo(ns, f))


def bench(data: dict) -> bytes:
    plt = plots._plt()
    rows = [r for r in data.get("results", []) if r.get("time_s") and not r.get("skipped")]
    has_mem = any(r.get("peak_bytes") for r in rows)
    fig, axes = plt.subplots(1, 2 if has_mem else 1, figsize=(10 if has_mem else 6, 3.8), dpi=110, squeeze=False)
    for impl in sorted({r["impl"] for r in rows}):
        pts = sorted((r["seq"], r["time_s"], r.get("peak_bytes")) for r in rows if r["impl"] == impl)
        axes[0][0].plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", label=impl)
        mem = [(p[0], p[2]) for p in pts if p[2]]
        if has_mem and mem:
            axes[0][1].plot([m[0] for m in mem], [m[1] / 2**20 for m in mem], marker="o", label=impl)
    axes[0][0].set_ylabel("forward time (ms)")
    if has_mem:
        axes[0][1].set_ylabel("extra peak memory (MiB)")
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _png(lambda f: (fig.savefig(f, format="png"), plt.close(fig)))


def train(data: dict) -> bytes:
    plt = plots._plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    for name, v in data["variants"].items():
        a1.plot(v["step"], v["val_loss"], marker=".", label=f"{name}")
        if v.get("entropy"):
            a2.plot(v["step"], [sum(e) / len(e) for e in v["entropy"]], marker=".", label=name)
    a1.set_ylabel("validation loss")
    a2.set_ylabel("softmax entropy, mean over layers (nats)")
    for ax in (a1, a2):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="variant")
    fig.tight_layout()
    return _png(lambda f: (fig.savefig(f, format="png"), plt.close(fig)))


def explore(name: str, data: dict) -> bytes:
    from attnlab.lab import explore as lab_explore

    result = lab_explore.get(name).from_dict({k: v for k, v in data.items() if k != "finding"})
    return _png(lambda f: explore_figs.figure(name, result, f))
