"""Where the lesson's numbers come from: the JSON the other commands wrote, or quick runs of our own.

The page is built from results measured on this machine. For each part -- ``demo``, ``bench``,
``train``, ``explore`` -- we read what the command wrote to the output folder. When it is not there
we measure it now, smaller and faster, and every such part carries an ``origin`` of ``"quick run"``
and a note the page shows next to it, so nobody mistakes a quick run for the full measurement.
"""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from attnlab.lesson import read
from attnlab.results import machine, versions


@dataclass
class Part:
    name: str
    origin: str  # "file" (written by the command), "quick run" (measured now, smaller) or "not measured"
    note: str  # shown on the page next to the numbers
    result: object | None  # the command's result (DemoResult, BenchResult, TrainResult, an explore result)
    finding: str = ""  # an experiment's finding, in a sentence or two


def _read(path: Path) -> dict | None:
    """A JSON object from ``path``, or None when there is none; a broken file is an error naming it, and so is a
    folder or a broken link of its name (read as none, it would be measured again without a word)."""
    if not path.is_file():
        if path.exists() or path.is_symlink():
            what = "a folder" if path.is_dir() else "a link to nothing readable"
            raise ValueError(f"{path} is {what}, not a result file; remove it or run the command again")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not readable JSON ({e}); remove it or run the command again") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def _from_file(out: Path, name: str, cls, command: str) -> Part | None:
    path = out / f"{name}.json"
    data = _read(path)
    if data is None:
        return None
    return Part(name, "file", f"from {path}", read.result(cls, data, path, command))


def demo(out: Path, seed: int) -> Part:
    from attnlab import demo as lab_demo

    found = _from_file(out, "demo", lab_demo.DemoResult, "attnlab demo")
    if found:
        return found

    r = lab_demo.run(seed=seed)
    return Part("demo", "quick run", f"demo.json was not in {out}, so the demo ran while this page was "
                f"built ({r.seconds:.1f} s); `attnlab demo --out {out}` writes it", r)


def quick_bench(seqs: list[int], repeats: int, heads: int = 2, d: int = 64):
    """Forward time of every registered form at a few lengths (no memory, no matmul peak): a smaller BenchResult."""
    import attnlab
    from attnlab.measure.bench import BenchResult, Row
    from attnlab.measure.flops import attention_flops
    from attnlab.measure.growth import exponent
    from attnlab.measure.timing import time_calls

    results = []
    for name, form in attnlab.forms().items():
        for T in seqs:
            if form.max_work is not None and heads * T * T > form.max_work:
                continue
            g = torch.Generator().manual_seed(T)
            q, k, v = (torch.randn(1, heads, T, d, generator=g) for _ in range(3))
            ts = time_calls(lambda name=name, q=q, k=k, v=v: attnlab.attention(q, k, v, impl=name), 1, repeats)
            med = statistics.median(ts)
            results.append(Row(name, T, med, min(ts), max(ts), attention_flops(1, heads, T, T, d) / med / 1e9))
    exponents = {}
    for name in dict.fromkeys(r.impl for r in results):
        rows = [r for r in results if r.impl == name]
        slope = exponent([r.seq for r in rows], [r.time_s for r in rows])
        if slope is not None:
            exponents[name] = {"time": slope, "memory": None}
    config = {"seq": seqs, "batch": 1, "heads": heads, "head_dim": d, "dtype": "float32", "repeats": repeats,
              "backward": False, "causal": False}
    return BenchResult(machine(), versions(), config, math.nan, results, exponents)  # NaN: no matmul peak measured


def bench(out: Path, quick: bool) -> Part:
    from attnlab.measure.bench import BenchResult

    found = _from_file(out, "bench", BenchResult, "attnlab bench")
    if found:
        return found
    seqs = [16, 64, 256] if quick else [16, 64, 256, 1024]
    t0 = time.perf_counter()
    result = quick_bench(seqs, repeats=5 if quick else 9)
    return Part("bench", "quick run", f"bench.json was not in {out}, so forward times at lengths "
                f"{', '.join(map(str, seqs))} (batch 1, 2 heads, d=64; no memory) were measured now in "
                f"{time.perf_counter() - t0:.1f} s; `attnlab bench --out {out}` measures time and memory properly",
                result)


def _train_kind(result) -> str | None:
    names = set(result.variants)
    if {"tied", "untied"} <= names:
        return "tie-kv"
    if "sqrt" in names:
        return "scale"
    return None


def train(out: Path, quick: bool, say=lambda line: None, progress=None) -> tuple[Part, Part]:
    """The scale comparison and the tied key/value ablation: from their JSON, else a tiny training run.

    ``attnlab train`` writes train.json (the scales) and tie_kv.json (the ablation); any train*.json or
    tie_kv*.json is read and told apart by its variants. Before a tiny run, ``say`` hears that it will train and for
    how long (timed on a few of its steps now); ``progress(steps, variants)``, a context manager yielding
    ``on_step`` (:func:`attnlab.report.train.train_progress`), shows each run's steps as they go.
    """
    from attnlab.train.train import TrainResult

    found: dict[str, Part] = {}
    for path in sorted(out.glob("train*.json")) + sorted(out.glob("tie_kv*.json")):
        cmd = "attnlab train" + (" --ablation tie-kv" if path.name.startswith("tie_kv") else "")
        result = read.result(TrainResult, _read(path), path, cmd)
        kind = _train_kind(result)
        if kind and kind not in found:
            found[kind] = Part(f"train {kind}", "file", f"from {path}", result)
    missing = [k for k in ("scale", "tie-kv") if k not in found]
    if missing and not quick:
        _say_training(out, missing, say)
    for kind in missing:
        cmd = "attnlab train" + (" --ablation tie-kv" if kind == "tie-kv" else "")
        if quick:
            found[kind] = Part(f"train {kind}", "not measured", f"no {'tie_kv' if kind == 'tie-kv' else 'train'}"
                               f".json in {out} and --quick skips training; run `{cmd} --out {out}` and build the "
                               "page again",
                               None)
            continue
        from attnlab.train import train as lab_train

        t0 = time.perf_counter()
        cfg = lab_train.PRESETS["tiny"]
        names = list(lab_train.SCALE_VARIANTS if kind == "scale" else lab_train.TIE_KV_VARIANTS)
        with tempfile.TemporaryDirectory() as tmp, (progress or _no_progress)(cfg.steps, names) as on_step:
            r = lab_train.run(cfg, kind=kind, out=tmp, on_step=on_step)
        layers = f"{cfg.n_layer} layer{'s' if cfg.n_layer != 1 else ''}"
        found[kind] = Part(f"train {kind}", "quick run", f"a tiny model ({layers}, d_model "
                           f"{cfg.d_model}) trained {cfg.steps} steps per variant while this page was built "
                           f"({time.perf_counter() - t0:.0f} s); `{cmd} --out {out}` trains the real one", r)
    return found["scale"], found["tie-kv"]


def _say_training(out: Path, missing: list[str], say) -> None:
    """That the page trains tiny models for what is missing, and for about how long: their steps timed now."""
    from attnlab.report.fmt import fmt_estimate
    from attnlab.train import estimate as train_time
    from attnlab.train import train as lab_train

    cfg = lab_train.PRESETS["tiny"]
    runs = sum(len(lab_train.SCALE_VARIANTS if kind == "scale" else lab_train.TIE_KV_VARIANTS) for kind in missing)
    files = " and ".join("train.json" if kind == "scale" else "tie_kv.json" for kind in missing)
    say(f"train: no {files} in {out}, so the page trains tiny models now: {runs} runs of {cfg.steps} steps (timing "
        "a few steps first)")
    est = train_time.estimate(cfg, lab_train.load_corpus(cfg))
    say(f"train: {fmt_estimate(est.seconds(cfg.steps, cfg.eval_every, runs))} on this machine now "
        f"({est.step_s * 1e3:.0f} ms a step); `attnlab train --out {out}` trains the real models instead, and "
        "--quick leaves training out")


@contextlib.contextmanager
def _no_progress(steps: int, variants: list[str]):
    yield None


def explore(out: Path, seed: int, quick: bool = False) -> dict[str, Part]:
    """Each experiment's result: from its JSON, else run now. One that trains (sinks) is not run at its full size
    while the page is built: a tiny run (seconds) stands in, labelled as such, or with ``quick`` nothing."""
    from attnlab import explore as lab_explore

    parts = {}
    for name, e in lab_explore.EXPERIMENTS.items():
        path = out / f"explore-{name}.json"
        data = _read(path)
        if data is not None:
            try:
                result = e.from_dict(data)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{path} is not a result of `attnlab explore {name}` ({err}); run it again") from None
            origin, note = "file", f"from {path}"
        elif e.trains and quick:
            parts[name] = Part(name, "not measured", f"no {path.name} in {out} and --quick skips training; run "
                               f"`attnlab explore {name} --out {out}` and build the page again", None)
            continue
        elif e.trains:
            result = e.load().run(seed=seed, preset="tiny")
            layers = f"{result.layers} layer{'s' if result.layers != 1 else ''}"
            origin, note = "quick run", (f"{path.name} was not in {out}, so tiny models (--preset tiny: "
                                         f"{layers}, {result.config['steps']} steps each) were trained "
                                         f"while this page was built ({result.seconds:.0f} s); `attnlab explore "
                                         f"{name} --out {out}` trains the real ones")
        else:
            result, origin, note = e.run(seed=seed), "computed now", "computed while this page was built"
        parts[name] = Part(name, origin, note, result, e.finding(result))
    return parts


def lab(out: Path) -> list:
    """The learner's ``attnlab lab check`` results kept in ``out`` (:mod:`attnlab.lab.store`), every
    check newest first; a broken one is an error naming it."""
    from attnlab.lab import store

    return store.history(out)
