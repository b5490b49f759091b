"""The page's figures, drawn from the results' JSON at a size made for the page.

The commands' own PNGs are made for a file viewer: wide, with 7-point legends that shrink to a few
pixels in a 940-pixel column. Here every figure is drawn again from the data, and while it is drawn
a matplotlib figure hook raises any text smaller than what reads as 12 CSS pixels once the figure
is scaled to the column (:data:`COLUMN_PX`), then lays the figure out again. Axes are autoscaled
over every value, so no curve is cut. The page shows each figure at the column's width and at its
full size on a click.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace

from attnlab.report import explore as explore_figs
from attnlab.report import plots

COLUMN_PX = 940  # the page's column, in CSS pixels
MIN_PX = 12.5  # the smallest text the page shows, in CSS pixels


def _enlarge(fig) -> None:
    """A figure hook: before saving, every text at least MIN_PX on the page, then lay out again."""
    save = fig.savefig

    def savefig(*args, **kwargs):
        import matplotlib.text

        w_in = fig.get_figwidth()
        px_per_pt = min(fig.dpi, COLUMN_PX / w_in) / 72  # CSS px per point once scaled into the column
        for t in fig.findobj(matplotlib.text.Text):
            if t.get_text() and t.get_fontsize() * px_per_pt < MIN_PX:
                t.set_fontsize(MIN_PX / px_per_pt)
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        kwargs.setdefault("bbox_inches", "tight")
        return save(*args, **kwargs)

    fig.savefig = savefig


def _png(draw) -> bytes:
    """Run ``draw(path)`` into a temporary file, with every figure made legible, and return the PNG bytes."""
    import matplotlib

    plots._plt()
    with tempfile.TemporaryDirectory() as tmp, matplotlib.rc_context({"figure.hooks": [f"{__name__}:_enlarge"]}):
        path = Path(tmp) / "figure.png"
        draw(path)
        return path.read_bytes()


def demo_map(data: dict) -> bytes:
    return _png(lambda f: plots.attention_map(data["map_weights"], f, title="Causal attention weights (demo)"))


def demo_scale(data: dict) -> bytes:
    ns = SimpleNamespace(peak=data["peak"], widths=data["widths"], scale_T=data["scale_T"])
    return _png(lambda f: plots.scale_demo(ns, f))


def bench(data: dict) -> bytes:
    def draw(path):
        plt = plots._plt()
        rows = [r for r in data.get("results", []) if r.get("time_s") and not r.get("skipped")]
        has_mem = any(r.get("peak_bytes") for r in rows)
        fig, axes = plt.subplots(1, 2 if has_mem else 1, figsize=(9.4, 4.2), dpi=100, squeeze=False)
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
            ax.legend()
        plots.save(fig, path)

    return _png(draw)


def train(data: dict) -> bytes:
    def draw(path):
        plt = plots._plt()
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9.4, 4.2), dpi=100)
        for name, v in data["variants"].items():
            nan = float("nan")  # a diverged run's JSON holds null
            a1.plot(v["step"], [nan if x is None else x for x in v["val_loss"]], marker=".", label=f"{name}")
            if v.get("entropy"):
                a2.plot(v["step"], [sum(e) / len(e) if e and None not in e else nan for e in v["entropy"]],
                        marker=".", label=name)
        a1.set_ylabel("validation loss")
        a2.set_ylabel("softmax entropy (nats)\nmean over layers")
        for ax in (a1, a2):
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(title="variant")
        plots.save(fig, path)

    return _png(draw)


def explore(name: str, data: dict) -> bytes:
    from attnlab.lab import explore as lab_explore

    result = lab_explore.get(name).from_dict({k: v for k, v in data.items() if k != "finding"})
    return _png(lambda f: explore_figs.figure(name, result, f))
