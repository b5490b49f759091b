"""Which of the lesson's measurements still have to run, why, and about how long each will take.

``attnlab lesson --build`` runs the commands whose results the page reads -- demo, bench, train, the
tied key/value ablation, the quick explore experiments, explore sinks (which trains two models) -- but
only those whose files are missing or stale, then builds the page. :func:`plan` decides: a result is
*stale* when another version of attnlab wrote it, or (for training) when it was trained with other
settings than ``attnlab train`` (or ``explore sinks``) uses now (an older default model had no heads to
name). Each step carries an estimate: training's from a few real steps timed on this machine
(:mod:`attnlab.train.estimate`), the others' from their sizes.
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
SECONDS = {"demo": 3.0, "bench": 7.0, "explore": 3.0, "page": 5.0}
REFERENCE_STEP_S = 0.18
# ...but the small steps have a part that does not scale (writing figures, collecting files): in builds whose step
# took 0.039 and 0.035 s (load 0.5-1.9, AMD EPYC) the demo took 1.36 and 0.97 s, explore 1.27 and 1.31 s, the page
# 3.2 and 4.1 s, where scaling the whole reference said 0.65, 0.65 and 1.1. FIXED is each one's unscaled part,
# fitted through those builds
FIXED = {"demo": 0.7, "explore": 0.8, "page": 2.7}
# A build that runs no step is the page alone, from a cold start: it loads matplotlib, draws its first figures and
# reads the checkpoint's heads itself, work of the same kind as the process's own start (loading torch and attnlab),
# and as fast or as slow on a busy machine. So it is estimated from the seconds the process took to reach the
# estimate: the page took 2.9-4.7 times as long in six builds (default trained model, AMD EPYC, 2 cores, load
# 10.7-12: page 14-22 s after a start of 4.3-5.0 s; the page after a full build took 6 s). STARTUP_RATIO is the
# first such estimate in a folder; after it, the median of the folder's last ratios (lesson-build.json keeps them).
# Without the process's start time (not Linux): the median of the folder's last page-only times, or PAGE_ONLY_S
STARTUP_RATIO, PAGE_ONLY_S = 4.0, 12.0
PAGES_KEPT, PAGES_USED = 6, 3
# ...and the bench is two parts. Its loops form is timed for as long as its budget allows, or skipped where its
# estimated calls do not fit (attnlab.measure.bench), so that part is the bench's own decision, made before the build
# starts from the same probe (bench.slow_forms_seconds). A decision on its edge flips: a loops call at T = 128 took
# 3.4-6.6 s in different processes on one idle machine, and five calls of 6 s are the bench's default 30 s -- one
# build skipped the form (the bench took 6.6 s), the next ran it (35 s). So the lesson's bench has BENCH_BUDGET_S,
# which every call of up to 12 s fits (T = 512, 16 times the work, is skipped at any of them). The rest -- the matmul
# peak, the fast forms at three lengths, the figure -- is SECONDS["bench"], not scaled: 6.6 s in the build that
# skipped the loops (step 0.036 s, AMD EPYC, load 1)
UNSCALED = {"bench"}
BENCH_BUDGET_S = 60.0


def scaled(name: str, step_s: float | None) -> float:
    """The estimate of step ``name`` on this machine now, from its training step time ``step_s`` (None: as
    measured in the reference build): its fixed part, and the rest scaled by the step."""
    if name in UNSCALED or not step_s:
        return SECONDS[name]
    fixed = FIXED.get(name, 0.0)
    return fixed + (SECONDS[name] - fixed) * step_s / REFERENCE_STEP_S


@dataclass
class Step(Result):
    name: str  # "demo", "bench", "train", "train tie-kv", "explore", "explore sinks"
    argv: list[str]  # the command that makes its results
    why: str | None  # "missing ..." or "stale: ..."; None: up to date, not run
    estimate_s: float
    seconds: float | None = None  # measured, once run
    last_s: float | None = None  # its time when it last ran, in this build or an earlier one (lesson-build.json)
    last_at: str | None = None  # when that build began (UTC, ISO 8601)


@dataclass
class PageTime(Result):
    """One build's page: its seconds, and whether the build ran the page alone (from a cold start)."""

    seconds: float
    alone: bool
    at: str = ""  # when that build began (UTC, ISO 8601)
    startup_s: float | None = None  # seconds from the process's start to the page's estimate (None: not known)


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
    started: str = ""  # when the build began (UTC, ISO 8601)
    page_estimate_s: float | None = None  # what the page was estimated to take, beforehand
    pages: list[PageTime] = field(default_factory=list)  # this folder's last page times, oldest first (this one too)


def previous(out: str | Path) -> BuildLog | None:
    """The last build's log in ``out`` (lesson-build.json), or None when there is none it can read."""
    data = _json(Path(out) / "lesson-build.json")
    try:
        return BuildLog.from_dict(data) if data is not None else None
    except (TypeError, ValueError, KeyError, AttributeError):  # written by hand, or by an older attnlab
        return None


def kept(steps: list[Step], before: BuildLog | None, started: str) -> list[Step]:
    """``steps`` each with its last measured time: this build's where it ran, else the last build's (which may
    itself be kept from an earlier one), so that a build which runs only the page loses none of them."""
    old = {s.name: s for s in before.steps} if before is not None else {}
    for s in steps:
        if s.seconds is not None:
            s.last_s, s.last_at = s.seconds, started
        elif s.name in old:
            o = old[s.name]
            s.last_s, s.last_at = (o.seconds, before.started or None) if o.seconds is not None else (o.last_s,
                                                                                                      o.last_at)
    return steps


def page_estimate(alone: bool, before: BuildLog | None, step_s: float | None = None,
                  startup_s: float | None = None) -> tuple[float, str]:
    """(the page's seconds, how that was estimated). Alone: the process's ``startup_s`` so far times the median of
    the folder's last :data:`PAGES_USED` ratios of page to startup (:data:`STARTUP_RATIO` before there are any).
    After steps: the median of the folder's last pages after steps, else the reference build's page scaled by the
    training step ``step_s`` (:func:`scaled`)."""
    import statistics

    same = [p for p in (before.pages if before is not None else []) if p.alone == alone][-PAGES_USED:]
    n = f"{len(same)} " if len(same) > 1 else ""
    if alone and startup_s:
        ratios = [p.seconds / p.startup_s for p in same if p.startup_s]
        ratio = statistics.median(ratios) if ratios else STARTUP_RATIO
        return startup_s * ratio, (f"{ratio:.1f} times the {startup_s:.1f} s this command took to start, " + (
            f"as this folder's last {n}page-only build{'s' if n else ''}" if ratios else "as measured on 2 cores"))
    if same:
        kind = ("page-only build" if alone else "page after steps") + ("s" if n else "")
        return statistics.median(p.seconds for p in same), f"as this folder's last {n}{kind}"
    if alone:
        return PAGE_ONLY_S, "a page-only build measured on 2 cores"
    return scaled("page", step_s), "scaled from a measured build by the training step timed now"


def pages(before: BuildLog | None, seconds: float, alone: bool, started: str,
          startup_s: float | None = None) -> list[PageTime]:
    """The folder's page times with this build's added, the last :data:`PAGES_KEPT` of them."""
    return [*(before.pages if before is not None else []), PageTime(seconds, alone, started, startup_s)][-PAGES_KEPT:]


def running_s() -> float | None:
    """Seconds since this process started (from Linux's /proc), or None where that is not known."""
    import os

    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks after boot
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


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


# explore sinks trains the default model's shape in the matrix form (it takes sinks), whose step took 1.3-1.6 times
# sdpa's (98 and 125 ms against 76, 1 thread, load 5-9 on 2 cores): its estimate when its own steps are not timed
SINKS_STEP_RATIO = 1.5


def _sinks_otherwise(data: dict) -> str | None:
    other = [k for k, v in (("preset", "default"), ("seed", 0)) if data.get(k) != v]
    return f"stale: trained with other settings ({', '.join(other)})" if other else None


def bench_loops_s() -> float:
    """Seconds the lesson's bench will spend on its loops form on this machine now (none where it will skip it):
    the bench's own timing and decision, made ahead (a few hundredths of a second)."""
    from attnlab.measure import bench

    return bench.slow_forms_seconds(bench.BenchConfig(impls=tuple(BENCH_FORMS.split(",")), budget_s=BENCH_BUDGET_S))


def plan(out: str | Path, train_estimate_s: float | None = None, step_s: float | None = None,
         sinks_estimate_s: float | None = None, loops_s: float | None = None) -> list[Step]:
    """Every step of the default lesson, each with why it must run (None: up to date) and its estimate.

    ``train_estimate_s``: seconds for one variant of the default training run, measured (None: not measured,
    the default preset's steps at REFERENCE_STEP_S a step); ``step_s``: the training step time measured now,
    which scales the other steps' estimates (:func:`scaled`); ``sinks_estimate_s``: explore sinks's seconds, from
    its own steps timed now (None: its steps at the training step times SINKS_STEP_RATIO); ``loops_s``: the
    bench's loops form's seconds (:func:`bench_loops_s`; None: not timed, as many as the bench's budget)."""
    from attnlab import explore
    from attnlab.explore import sinks
    from attnlab.train.train import PRESETS

    out = Path(out)
    cfg = PRESETS["default"]
    per_variant = train_estimate_s if train_estimate_s is not None else cfg.steps * REFERENCE_STEP_S
    trained = _trained_otherwise(cfg)
    ckpt = out / "checkpoints" / "scale-sqrt.pt"
    train_why = _stale(out / "train.json", trained) or (None if ckpt.is_file() else f"{ckpt.name} is missing")
    stale_explore = dict.fromkeys(w for name in explore.quick() if (w := _stale(out / f"explore-{name}.json")))
    if sinks_estimate_s is None:
        sinks_estimate_s = sinks.seconds_from_step((step_s or REFERENCE_STEP_S) * SINKS_STEP_RATIO)
    o = ["--out", str(out)]
    return [
        Step("demo", ["demo", *o], _stale(out / "demo.json"), scaled("demo", step_s)),
        Step("bench", ["bench", "--impl", BENCH_FORMS, "--budget", f"{BENCH_BUDGET_S:g}", *o],
             _stale(out / "bench.json"),
             scaled("bench", step_s) + (BENCH_BUDGET_S if loops_s is None else loops_s)),
        Step("train", ["train", *o], train_why, 3 * per_variant),
        # its separate-K/V model is the scale run's 1/sqrt(d) model (the same settings, seed and data), which
        # `attnlab train` reuses: the ablation trains one model, not two
        Step("train tie-kv", ["train", "--ablation", "tie-kv", *o], _stale(out / "tie_kv.json", trained), per_variant),
        Step("explore", ["explore", *explore.quick(), *o], "; ".join(stale_explore) or None,
             scaled("explore", step_s)),
        Step("explore sinks", ["explore", "sinks", *o], _stale(out / "explore-sinks.json", _sinks_otherwise),
             sinks_estimate_s),
    ]
