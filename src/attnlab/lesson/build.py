"""Which of the lesson's measurements still have to run, why, and about how long each will take.

``attnlab lesson --build`` runs the commands whose results the page reads -- demo, bench, train, the
tied key/value ablation, explore -- but only those whose files are missing or stale, then builds
the page. :func:`plan` decides: a result is *stale* when another version of attnlab wrote it, or
(for training) when it was trained with other settings than ``attnlab train`` uses now (an older
default model had no heads to name). Each step carries an estimate: training's from a few real
steps timed on this machine (:mod:`attnlab.train.estimate`), the others' from their sizes.
:class:`BuildLog` is what the build measured, written as JSON beside the page.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnlab import __version__
from attnlab.results import Result

# the lesson's bench: the forms the page compares, at the lab's lengths (flex's compilation is left out: it
# would double the time and the page does not need it)
BENCH_FORMS = "loops,matrix,flash,sdpa"
# seconds each step took in a measured build (at load 3-7 on 2 cores, rounded up) whose training step, timed
# before it started, took REFERENCE_STEP_S; a build scales them by its own step time (a machine twice as busy
# takes about twice as long for every step)
SECONDS = {"demo": 3.0, "bench": 34.0, "explore": 3.0, "page": 5.0}
REFERENCE_STEP_S = 0.18
# ...but the small steps have a part that does not scale (writing figures, collecting files): in builds whose step
# took 0.039 and 0.035 s (load 0.5-1.9, AMD EPYC) the demo took 1.36 and 0.97 s, explore 1.27 and 1.31 s, the page
# 3.2 and 4.1 s, where scaling the whole reference said 0.65, 0.65 and 1.1. FIXED is each one's unscaled part,
# fitted through those builds
FIXED = {"demo": 0.7, "explore": 0.8, "page": 2.7}
# ...and the bench, whose cases are timed for as long as their time budgets allow (attnlab.measure.bench), is not
# scaled at all: 42 s in the reference build, then 40, 28, 48, 36 and 26.8 s in builds whose step took 0.034-0.049
# s; 34 s is within 30 % of every one of them
UNSCALED = {"bench"}


def scaled(name: str, step_s: float | None) -> float:
    """The estimate of step ``name`` on this machine now, from its training step time ``step_s`` (None: as
    measured in the reference build): its fixed part, and the rest scaled by the step."""
    if name in UNSCALED or not step_s:
        return SECONDS[name]
    fixed = FIXED.get(name, 0.0)
    return fixed + (SECONDS[name] - fixed) * step_s / REFERENCE_STEP_S


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
    threads: dict | None = None  # the thread count chosen from a measurement (attnlab.train.estimate.ThreadChoice)
    step_s: float | None = None  # the training step time the estimates were made from
    load_after: list[float] = field(default_factory=list)  # when the build finished


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# the results the page reads from the output folder, by name, and those `lesson --build` makes again when stale
READ = ("demo.json", "bench.json", "train*.json", "tie_kv*.json", "explore-*.json", "lab-*.json")
REBUILT = ("demo.json", "bench.json", "train.json", "tie_kv.json", "explore-*.json")


def written_by(data: dict) -> dict:
    """The versions a result says wrote it (``{}`` when it says none)."""
    found = data.get("versions")
    return found if isinstance(found, dict) else {}


def other_versions(out: str | Path, patterns=READ) -> dict[str, dict]:
    """The results in ``out`` (those the lesson reads, or ``patterns``) that another version of attnlab wrote:
    file name -> their versions."""
    out, found = Path(out), {}
    for pattern in patterns:
        for path in sorted(out.glob(pattern)):
            data = _json(path)
            if data is not None and written_by(data).get("attnlab") != __version__:
                found[path.name] = written_by(data)
    return found


def versions_line(found: dict[str, dict], then: str) -> str | None:
    """One line naming each file of ``found`` (:func:`other_versions`) with the version that wrote it, this
    version, and ``then`` (what happens to them); None when there are none. torch is named where it differs."""
    import torch

    if not found:
        return None
    groups: dict[str, list[str]] = {}
    for name, v in found.items():
        by = f"attnlab {v['attnlab']}" if v.get("attnlab") else "a version that did not say"
        if v.get("torch") and v["torch"] != torch.__version__:
            by += f" with torch {v['torch']}"
        groups.setdefault(by, []).append(name)
    said = "; ".join(f"{', '.join(names)} by {by}" for by, names in groups.items())
    torch_now = f" with torch {torch.__version__}" if "torch" in said else ""
    return f"written by another version (this is attnlab {__version__}{torch_now}): {said}; {then}"


def _stale(path: Path, extra=None) -> str | None:
    """Why the result in ``path`` must be made again (missing, unreadable, another version, ``extra``), or None.
    Which version wrote it is said once for all files, before the steps (:func:`versions_line`)."""
    data = _json(path)
    if data is None:
        return f"{path.name} is missing" if not path.exists() else f"{path.name} is not readable JSON"
    if written_by(data).get("attnlab") != __version__:
        return "stale: written by another version"
    return extra(data) if extra else None


def _trained_otherwise(cfg) -> callable:
    def check(data: dict) -> str | None:
        now = asdict(cfg)
        old = data.get("config") or {}
        diff = [k for k in now if k in old and old[k] != now[k]] + [k for k in now if k not in old]
        return f"stale: trained with other settings ({', '.join(sorted(diff)[:4])})" if diff else None
    return check


def plan(out: str | Path, train_estimate_s: float | None = None, step_s: float | None = None) -> list[Step]:
    """Every step of the default lesson, each with why it must run (None: up to date) and its estimate.

    ``train_estimate_s``: seconds for one variant of the default training run, measured (None: not measured,
    the default preset's steps at REFERENCE_STEP_S a step); ``step_s``: the training step time measured now,
    which scales the other steps' estimates (:func:`scaled`)."""
    from attnlab import explore
    from attnlab.train.train import PRESETS

    out = Path(out)
    cfg = PRESETS["default"]
    per_variant = train_estimate_s if train_estimate_s is not None else cfg.steps * REFERENCE_STEP_S
    trained = _trained_otherwise(cfg)
    ckpt = out / "checkpoints" / "scale-sqrt.pt"
    train_why = _stale(out / "train.json", trained) or (None if ckpt.is_file() else f"{ckpt.name} is missing")
    stale_explore = dict.fromkeys(w for name in explore.EXPERIMENTS if (w := _stale(out / f"explore-{name}.json")))
    o = ["--out", str(out)]
    return [
        Step("demo", ["demo", *o], _stale(out / "demo.json"), scaled("demo", step_s)),
        Step("bench", ["bench", "--impl", BENCH_FORMS, *o], _stale(out / "bench.json"), scaled("bench", step_s)),
        Step("train", ["train", *o], train_why, 3 * per_variant),
        # its separate-K/V model is the scale run's 1/sqrt(d) model (the same settings, seed and data), which
        # `attnlab train` reuses: the ablation trains one model, not two
        Step("train tie-kv", ["train", "--ablation", "tie-kv", *o], _stale(out / "tie_kv.json", trained), per_variant),
        Step("explore", ["explore", "all", *o], "; ".join(stale_explore) or None, scaled("explore", step_s)),
    ]
