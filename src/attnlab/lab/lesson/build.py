"""Which of the lesson's measurements still have to run, why, and about how long each will take.

``attnlab lesson --build`` runs the commands whose results the page reads -- demo, bench, train, the
tied key/value ablation, explore -- but only those whose files are missing or stale, then builds
the page. :func:`plan` decides: a result is *stale* when another version of attnlab wrote it, or
(for training) when it was trained with other settings than ``attnlab train`` uses now (an older
default model had no heads to name). Each step carries an estimate: training's from a few real
steps timed on this machine (:mod:`attnlab.lab.train.estimate`), the others' from their sizes.
:class:`BuildLog` is what the build measured, written as JSON beside the page.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlab import __version__
from attnlab.lab.results import Result

# the lesson's bench: the forms the page compares, at the lab's lengths (flex's compilation is left out: it
# would double the time and the page does not need it)
BENCH_FORMS = "loops,matrix,flash,sdpa"
SECONDS = {"demo": 10.0, "bench": 45.0, "explore": 15.0, "page": 15.0}  # measured on 2 idle cores, rounded up


@dataclass
class Step(Result):
    name: str  # "demo", "bench", "train", "train tie-kv", "explore"
    argv: list[str]  # the command that makes its results
    why: str | None  # "missing ..." or "stale: ..."; None: up to date, not run
    estimate_s: float
    seconds: float | None = None  # measured, once run


@dataclass
class BuildLog(Result):
    out: str
    steps: list[Step]
    page_s: float | None = None  # collecting and writing the page
    total_s: float | None = None
    load_average: list[float] = field(default_factory=list)  # 1, 5, 15 minutes, when the build started
    cpu_count: int | None = None


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _stale(path: Path, extra=None) -> str | None:
    """Why the result in ``path`` must be made again (missing, unreadable, another version, ``extra``), or None."""
    data = _json(path)
    if data is None:
        return f"{path.name} is missing" if not path.exists() else f"{path.name} is not readable JSON"
    wrote = (data.get("versions") or {}).get("attnlab")
    if wrote != __version__:
        return f"stale: {path.name} was written by attnlab {wrote or 'of unknown version'}, this is {__version__}"
    return extra(data) if extra else None


def _trained_otherwise(cfg) -> callable:
    def check(data: dict) -> str | None:
        now = asdict(cfg)
        old = data.get("config") or {}
        diff = [k for k in now if k in old and old[k] != now[k]] + [k for k in now if k not in old]
        return f"stale: trained with other settings ({', '.join(sorted(diff)[:4])})" if diff else None
    return check


def plan(out: str | Path, train_estimate_s: float | None = None) -> list[Step]:
    """Every step of the default lesson, each with why it must run (None: up to date) and its estimate.

    ``train_estimate_s``: seconds for one variant of the default training run, measured (None: not measured,
    the default preset's steps at 60 ms a step)."""
    from attnlab.lab import explore
    from attnlab.lab.train.train import PRESETS

    out = Path(out)
    cfg = PRESETS["default"]
    per_variant = train_estimate_s if train_estimate_s is not None else cfg.steps * 0.06
    trained = _trained_otherwise(cfg)
    ckpt = out / "checkpoints" / "scale-sqrt.pt"
    train_why = _stale(out / "train.json", trained) or (None if ckpt.is_file() else f"{ckpt.name} is missing")
    stale_explore = [w for name in explore.EXPERIMENTS if (w := _stale(out / f"explore-{name}.json"))]
    o = ["--out", str(out)]
    return [
        Step("demo", ["demo", *o], _stale(out / "demo.json"), SECONDS["demo"]),
        Step("bench", ["bench", "--impl", BENCH_FORMS, *o], _stale(out / "bench.json"), SECONDS["bench"]),
        Step("train", ["train", *o], train_why, 3 * per_variant),
        # its separate-K/V model is the scale run's 1/sqrt(d) model (the same settings, seed and data), which
        # `attnlab train` reuses: the ablation trains one model, not two
        Step("train tie-kv", ["train", "--ablation", "tie-kv", *o], _stale(out / "tie_kv.json", trained), per_variant),
        Step("explore", ["explore", "all", *o], "; ".join(stale_explore) or None, SECONDS["explore"]),
    ]
