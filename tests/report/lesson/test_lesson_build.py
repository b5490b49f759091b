"""`attnlab lesson --build`: only what is missing or stale runs, said beforehand with an estimate, a line per step
on the terminal and in lesson-build.log, the measured seconds in lesson-build.json."""

import json
from dataclasses import asdict

import pytest

from attnlab import __version__
from attnlab.lab import explore
from attnlab.lab.lesson import build
from attnlab.lab.results import write_json
from attnlab.lab.train import train

from .conftest import BENCH, TIE, TRAIN, tiny_checkpoint

NOW = {"attnlab": __version__}


def _up_to_date(out, but=()):
    """Every result the default lesson reads, as this version writes them, except those in ``but``."""
    cfg = asdict(train.PRESETS["default"]) | {"corpus_info": {"name": "python stdlib"}, "head_dim": 32}
    files = {"bench.json": BENCH | {"versions": NOW},
             "train.json": TRAIN | {"versions": NOW, "config": TRAIN["config"] | cfg},
             "tie_kv.json": TIE | {"versions": NOW, "config": TIE["config"] | cfg},
             "demo.json": {"versions": NOW}}
    for name, data in files.items():
        if name not in but:
            (out / name).write_text(json.dumps(data))
    for name, e in explore.EXPERIMENTS.items():
        if "explore" not in but:
            write_json(e.run(seed=0), out / f"explore-{name}.json")
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")


def test_the_plan_runs_only_what_is_missing_or_stale(tmp_path):
    steps = build.plan(tmp_path, train_estimate_s=50.0)
    assert [s.name for s in steps] == ["demo", "bench", "train", "train tie-kv", "explore"]
    assert all(s.why and "missing" in s.why for s in steps)
    assert [s.estimate_s for s in steps if s.name.startswith("train")] == [150.0, 50.0]  # tie-kv trains one model
    assert steps[1].argv[:3] == ["bench", "--impl", "loops,matrix,flash,sdpa"]
    _up_to_date(tmp_path)
    assert [s.why for s in build.plan(tmp_path)] == [None] * 5
    old = json.loads((tmp_path / "bench.json").read_text()) | {"versions": {"attnlab": "0.0.1"}}
    (tmp_path / "bench.json").write_text(json.dumps(old))
    other = json.loads((tmp_path / "train.json").read_text())
    other["config"]["steps"] = 150  # trained by an older default: no heads to name
    (tmp_path / "train.json").write_text(json.dumps(other))
    (tmp_path / "checkpoints" / "scale-sqrt.pt").unlink()
    why = {s.name: s.why for s in build.plan(tmp_path)}
    assert why["bench"] == f"stale: bench.json was written by attnlab 0.0.1, this is {__version__}"
    assert why["train"] == "stale: trained with other settings (steps)" and why["demo"] is None
    other["config"]["steps"] = train.PRESETS["default"].steps
    (tmp_path / "train.json").write_text(json.dumps(other))
    assert {s.name: s.why for s in build.plan(tmp_path)}["train"] == "scale-sqrt.pt is missing"


@pytest.mark.slow
def test_build_says_what_it_will_run_and_how_long_then_logs_each_step(run_cli, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    _up_to_date(out, but=("demo.json",))
    r = run_cli("lesson", "--build", "--out", "out", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    lines = r.stdout.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("lesson --build:"))
    assert "1 of 5 steps to run, then the page: about" in lines[first] and "load" in lines[first]
    assert "  demo: demo.json is missing; about 10 s (attnlab demo --out out)" in lines
    assert "  train: up to date" in lines and "  bench: up to date" in lines
    assert any(x.startswith("[1/1] demo: done in") for x in lines) and "wrote out/lesson.html" in r.stdout
    log = (out / "lesson-build.log").read_text()
    assert "[1/1] demo: starting" in log and "[1/1] demo: done in" in log and "lesson --build: done in" in log
    done = json.loads((out / "lesson-build.json").read_text())
    ran = [s for s in done["steps"] if s["seconds"] is not None]
    assert [s["name"] for s in ran] == ["demo"] and ran[0]["seconds"] > 0 and done["page_s"] > 0
    assert done["cpu_count"] >= 1 and len(done["load_average"]) == 3
    assert json.loads((out / "demo.json").read_text())["versions"]["attnlab"] == __version__
    bad = run_cli("lesson", "--build", "--quick")
    assert bad.returncode == 2 and "does not go with --quick" in bad.stderr
