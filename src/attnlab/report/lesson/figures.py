"""The page's figures: report's own figure functions, drawn at a size made for the page.

The commands' PNGs are made for a file viewer: wide, with 7-point legends that shrink to a few
pixels in a 940-pixel column. Here the same functions draw from the same results, narrower, and
while they draw a matplotlib figure hook raises any text smaller than what reads as 12 CSS pixels
once the figure is scaled to the column (:data:`COLUMN_PX`), then lays the figure out again, and
draws it at :data:`SHARPNESS` image pixels per CSS pixel. Axes are autoscaled over every value, so
no curve is cut. The page shows each figure at the column's width (a phone scrolls it sideways
rather than shrink its text under 10 px) and at up to twice that on a click.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from attnlab.report import bench as bench_figs
from attnlab.report import explore as explore_figs
from attnlab.report import plots
from attnlab.report import train as train_figs

COLUMN_PX = 940  # the page's column, in CSS pixels
MIN_PX = 12.5  # the smallest text the page shows, in CSS pixels
SHARPNESS = 2  # image pixels per CSS pixel: sharp on high-density screens, and when enlarged to twice the size


def _enlarge(fig) -> None:
    """A figure hook: before saving, every text at least MIN_PX on the page, then lay out again."""
    save = fig.savefig

    def savefig(*args, **kwargs):
        import matplotlib.text

        w_in = fig.get_figwidth()
        px_per_in = min(fig.dpi, COLUMN_PX / w_in)  # CSS px per inch once scaled into the column
        px_per_pt = px_per_in / 72
        for t in fig.findobj(matplotlib.text.Text):
            if t.get_text() and t.get_fontsize() * px_per_pt < MIN_PX:
                t.set_fontsize(MIN_PX / px_per_pt)
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        return save(*args, **{**kwargs, "dpi": SHARPNESS * px_per_in})

    fig.savefig = savefig


def _png(draw) -> bytes:
    """Run ``draw(path)`` into a temporary file, with every figure made legible, and return the PNG bytes."""
    import matplotlib

    plots._plt()
    with tempfile.TemporaryDirectory() as tmp, matplotlib.rc_context({"figure.hooks": [f"{__name__}:_enlarge"]}):
        path = Path(tmp) / "figure.png"
        draw(path)
        return path.read_bytes()


PAGE = {"size": (9.4, 4.2), "dpi": 100}  # the column's width in inches at 100 dpi


def demo_map(result) -> bytes:
    return _png(lambda f: plots.attention_map(result.map_weights, f, title="Causal attention weights (demo)"))


def demo_scale(result) -> bytes:
    return _png(lambda f: plots.scale_demo(result, f))


def bench(result) -> bytes:
    return _png(lambda f: bench_figs.figure(result, f, **PAGE))


def train(result) -> bytes:
    return _png(lambda f: train_figs.figure(result, f, panels=("loss", "entropy"), train_loss=False, zoom=False,
                                            **PAGE))


def explore(name: str, result) -> bytes:
    return _png(lambda f: explore_figs.figure(name, result, f))
