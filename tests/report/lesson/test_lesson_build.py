"""`attnlab lesson --build`: only what is missing or stale runs, said beforehand with an estimate, a line per step
on the terminal and in lesson-build.log, the measured seconds in lesson-build.json."""

import contextlib
import json
import re
from dataclasses import asdict

import pytest

from attnlab import __version__, explore
from attnlab.lesson import build
from attnlab.results import write_json
from attnlab.train import train

from .conftest import BENCH, TIE, TRAIN, sinks_result, tiny_checkpoint

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
    for name in explore.quick():
        if "explore" not in but:
            write_json(explore.get(name).run(seed=0), out / f"explore-{name}.json")
    if "explore-sinks.json" not in but:
        write_json(sinks_result(), out / "explore-sinks.json")
    tiny_checkpoint(out / "checkpoints" / "scale-sqrt.pt")


def test_the_plan_runs_only_what_is_missing_or_stale(tmp_path):
    steps = build.plan(tmp_path, train_estimate_s=50.0)
    assert [s.name for s in steps] == ["demo", "bench", "train", "train tie-kv", "explore", "explore sinks"]
    assert all(s.why and "missing" in s.why for s in steps)
    assert [s.estimate_s for s in steps if s.name.startswith("train")] == [150.0, 50.0]  # tie-kv trains one model
    assert steps[1].argv[:5] == ["bench", "--impl", "loops,matrix,flash,sdpa", "--budget", "60"]
    busy = build.plan(tmp_path, 50.0, step_s=2 * build.REFERENCE_STEP_S)  # a step twice as slow: the steps' scaled
    assert [b.estimate_s for b in busy] == pytest.approx(  # parts too, but not the bench, bound by its time budgets
        [s.estimate_s if s.name.startswith("train") or s.name in build.UNSCALED else
         2 * s.estimate_s - build.FIXED.get(s.name, 0.0) for s in steps])
    assert all(b.estimate_s > s.estimate_s for b, s in zip(busy, steps, strict=True) if s.name in build.FIXED)
    assert steps[0].estimate_s == build.SECONDS["demo"]
    assert busy[1].estimate_s == build.SECONDS["bench"] + build.BENCH_BUDGET_S  # loops not timed: its whole budget
    timed = build.plan(tmp_path, 50.0, loops_s=21.0)  # the loops form's seconds, as the bench will decide them
    assert timed[1].estimate_s == build.SECONDS["bench"] + 21.0
    assert build.plan(tmp_path, 50.0, loops_s=0.0)[1].estimate_s == build.SECONDS["bench"]  # it will skip it
    _up_to_date(tmp_path)
    assert [s.why for s in build.plan(tmp_path)] == [None] * 6
    old = json.loads((tmp_path / "bench.json").read_text()) | {"versions": {"attnlab": "0.0.1"}}
    (tmp_path / "bench.json").write_text(json.dumps(old))
    other = json.loads((tmp_path / "train.json").read_text())
    other["config"]["steps"] = 150  # trained by an older default: no heads to name
    (tmp_path / "train.json").write_text(json.dumps(other))
    (tmp_path / "checkpoints" / "scale-sqrt.pt").unlink()
    why = {s.name: s.why for s in build.plan(tmp_path)}
    assert why["bench"] == "stale: written by another version"  # which version: said once, for every file
    assert build.other_versions(tmp_path) == {"bench.json": {"attnlab": "0.0.1"}}
    assert why["train"] == "stale: trained with other settings (steps)" and why["demo"] is None
    other["config"]["steps"] = train.PRESETS["default"].steps
    (tmp_path / "train.json").write_text(json.dumps(other))
    assert {s.name: s.why for s in build.plan(tmp_path)}["train"] == "scale-sqrt.pt is missing"


def test_explore_sinks_is_a_step_of_its_own_with_its_estimate(tmp_path):
    """It trains two models (a minute or two): its own step, estimated from its own steps timed now, or from the
    training step; the quick experiments stay one step of a second."""
    from attnlab.explore import sinks

    steps = {s.name: s for s in build.plan(tmp_path, 50.0, step_s=0.1, sinks_estimate_s=77.0)}
    assert steps["explore"].argv[:-2] == ["explore", *explore.quick()] and "sinks" not in steps["explore"].argv
    assert steps["explore sinks"].argv == ["explore", "sinks", "--out", str(tmp_path)]
    assert steps["explore sinks"].estimate_s == 77.0 and steps["explore sinks"].why == "explore-sinks.json is missing"
    guessed = {s.name: s for s in build.plan(tmp_path, 50.0, step_s=0.1)}["explore sinks"].estimate_s
    assert guessed == pytest.approx(sinks.seconds_from_step(0.1 * build.SINKS_STEP_RATIO))
    assert 2 * sinks.PRESETS["default"].steps * 0.1 < guessed < 4 * sinks.PRESETS["default"].steps * 0.1
    _up_to_date(tmp_path)
    assert {s.name: s.why for s in build.plan(tmp_path)}["explore sinks"] is None
    write_json(sinks_result(preset="tiny"), tmp_path / "explore-sinks.json")  # the learner's tiny run
    why = {s.name: s.why for s in build.plan(tmp_path)}
    assert why["explore sinks"] == "stale: trained with other settings (preset)" and why["explore"] is None


def test_the_files_another_version_wrote_are_named_in_one_line_with_their_versions(tmp_path):
    import torch

    _up_to_date(tmp_path)
    assert build.versions_line(build.other_versions(tmp_path), "made again") is None
    for name, wrote in (("demo.json", {"attnlab": "0.0.1", "torch": "2.0.0"}), ("bench.json", {"attnlab": "0.0.1",
                        "torch": "2.0.0"}), ("tie_kv.json", {}), ("lab-mine.json", {"attnlab": "0.0.2",
                        "torch": torch.__version__})):
        (tmp_path / name).write_text(json.dumps({"versions": wrote}))
    line = build.versions_line(build.other_versions(tmp_path), "made again")
    assert line == (f"written by another version (this is attnlab {__version__} with torch {torch.__version__}): "
                    "demo.json, bench.json by attnlab 0.0.1 with torch 2.0.0; tie_kv.json by a version that did not "
                    "say; lab-mine.json by attnlab 0.0.2; made again")
    assert "lab-mine.json" not in build.versions_line(build.other_versions(tmp_path, build.REBUILT), "made again")
    plan = {s.name: s.why for s in build.plan(tmp_path)}
    assert plan["demo"] == plan["bench"] == plan["train tie-kv"] == "stale: written by another version"
    assert plan["train"] is None and plan["explore"] is None


# a whole lesson --build on a page-only folder: its plan, its estimate and its log (the log's write path and the
# build's refusals are in make test)
@pytest.mark.long
@pytest.mark.slow
def test_build_says_what_it_will_run_and_how_long_then_logs_each_step(run_cli, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    _up_to_date(out, but=("demo.json",))
    r = run_cli("lesson", "--build", "--out", "out", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    lines = r.stdout.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("lesson --build:") and "steps to run" in x)
    assert "1 of 6 steps to run, then the page: about" in lines[first] and "load" in lines[first]
    assert any(re.fullmatch(r"  demo: demo.json is missing; about \d+ s \(attnlab demo --out out\)", x) for x in lines)
    chose = next(x for x in lines if "the faster here now" in x)  # 1 or 2 threads, from timed steps at each
    assert re.search(r"lesson --build: [12] threads?, the faster here now \(1: \d+ ms a training step", chose)
    assert "  train: up to date" in lines and "  bench: up to date" in lines
    assert any(x.startswith("[1/1] demo: done in") for x in lines) and "wrote out/lesson.html" in r.stdout
    log = (out / "lesson-build.log").read_text()
    assert "[1/1] demo: starting" in log and "[1/1] demo: done in" in log and "lesson --build: done in" in log
    done = json.loads((out / "lesson-build.json").read_text())
    ran = [s for s in done["steps"] if s["seconds"] is not None]
    assert [s["name"] for s in ran] == ["demo"] and ran[0]["seconds"] > 0 and done["page_s"] > 0
    assert done["cpu_count"] >= 1 and len(done["load_average"]) == 3 and len(done["load_after"]) == 3
    assert done["threads"]["threads"] in (1, 2) and "1" in done["threads"]["step_s"] and done["step_s"] > 0
    assert any(re.search(r"\[1/1\] demo: done in \d+ s \(estimated about \d+ s\); about \d+ s left, re-estimated", x)
               for x in lines)
    assert json.loads((out / "demo.json").read_text())["versions"]["attnlab"] == __version__
    assert ran[0]["last_s"] == ran[0]["seconds"] and [p["alone"] for p in done["pages"]] == [False]
    bad = run_cli("lesson", "--build", "--quick")
    assert bad.returncode == 2 and "does not go with --quick" in bad.stderr


# a real demo and the page, through the console script (19 s in a busy suite): make test-long; the line itself is
# held in-process by test_the_files_another_version_wrote_are_named_in_one_line_with_their_versions
@pytest.mark.long
@pytest.mark.slow
def test_lesson_says_which_file_another_version_wrote_before_reading_it(run_cli, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    _up_to_date(out)
    (out / "demo.json").unlink()  # a real one, then marked as another version's
    assert run_cli("demo", "--out", "out").returncode == 0
    demo = json.loads((out / "demo.json").read_text())
    demo["versions"] |= {"attnlab": "0.0.1", "torch": "2.0.0"}
    (out / "demo.json").write_text(json.dumps(demo))
    r = run_cli("lesson", "--out", "out")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    said = [i for i, x in enumerate(lines) if "written by another version" in x]
    assert len(said) == 1 and said[0] < next(i for i, x in enumerate(lines) if x.strip() == "demo"), r.stdout
    assert "demo.json by attnlab 0.0.1 with torch 2.0.0; the page shows them as they are" in lines[said[0]]
    assert "  demo: from out/demo.json" in lines


def test_the_bench_estimate_does_not_shrink_with_a_faster_training_step():
    """The bench is timed against budgets: measured 42 s at a step of 0.18 s and 40 s at 0.049 s. Scaled by the step
    it was estimated at 10 s for a build whose bench took 40 s; the other steps do scale."""
    fast = build.REFERENCE_STEP_S / 4
    assert build.scaled("bench", fast) == build.scaled("bench", None) == build.SECONDS["bench"]
    # the small steps: a fixed part, and the rest scaled by the step
    demo, fixed = build.SECONDS["demo"], build.FIXED["demo"]
    assert build.scaled("demo", fast) == pytest.approx(fixed + (demo - fixed) / 4)
    assert build.scaled("explore", 2 * build.REFERENCE_STEP_S) == pytest.approx(
        2 * build.SECONDS["explore"] - build.FIXED["explore"])


# the command itself (a page built from a cold start, ~25 s in a busy suite): make test-long; the keeping and the
# estimate are held in-process by the two tests after it
@pytest.mark.long
@pytest.mark.slow
def test_a_page_only_build_through_the_command_keeps_the_full_builds_times(run_cli, tmp_path):
    out = tmp_path / "out"
    (out / "checkpoints").mkdir(parents=True)
    _up_to_date(out)
    from attnlab import demo

    write_json(demo.run(seed=0), out / "demo.json")  # a whole one: the page reads it
    full = _ran(build.BuildLog(str(out), build.plan(out), started="2026-12-01T10:00:00+00:00",
                               pages=[build.PageTime(6.0, False, "2026-12-01T10:00:00+00:00")]),
                demo=1.4, bench=40.0, train=101.0, **{"train tie-kv": 27.0, "explore": 1.3, "explore sinks": 95.0})
    full.steps = build.kept(full.steps, None, full.started)
    write_json(full, out / "lesson-build.json")
    r = run_cli("lesson", "--build", "--out", "out", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    assert "0 of 6 steps to run" in r.stdout and "times the" in r.stdout and "this command took to start" in r.stdout
    done = json.loads((out / "lesson-build.json").read_text())
    assert [s["seconds"] for s in done["steps"]] == [None] * 6
    assert [s["last_s"] for s in done["steps"]] == [1.4, 40.0, 101.0, 27.0, 1.3, 95.0]
    assert [p["alone"] for p in done["pages"]] == [False, True] and done["pages"][1]["startup_s"] > 0
    print(f"page-only build: page {done['page_s']:.1f} s, estimated {done['page_estimate_s']:.1f} s")


def _ran(log, **seconds):
    """``log``'s steps, those named in ``seconds`` run for that long (a build as `lesson --build` leaves it)."""
    for s in log.steps:
        s.seconds = seconds.get(s.name)
    return log


def test_a_build_that_runs_no_step_keeps_every_steps_last_time(tmp_path):
    """A page-only build used to write "seconds": null over the full build's step times."""
    full = _ran(build.BuildLog(str(tmp_path), build.plan(tmp_path), started="2026-12-01T10:00:00+00:00"),
                demo=1.4, bench=40.0, train=101.0, **{"train tie-kv": 27.0, "explore": 1.3, "explore sinks": 95.0})
    full.steps = build.kept(full.steps, None, full.started)
    write_json(full, tmp_path / "lesson-build.json")
    before = build.previous(tmp_path)
    assert [s.last_s for s in before.steps] == [1.4, 40.0, 101.0, 27.0, 1.3, 95.0]
    for started in ("2026-12-01T11:00:00+00:00", "2026-12-01T12:00:00+00:00"):  # two page-only builds in a row
        page = _ran(build.BuildLog(str(tmp_path), build.plan(tmp_path), started=started))
        page.steps = build.kept(page.steps, build.previous(tmp_path), started)
        write_json(page, tmp_path / "lesson-build.json")
    kept = json.loads((tmp_path / "lesson-build.json").read_text())["steps"]
    assert [s["seconds"] for s in kept] == [None] * 6  # this build ran none of them
    assert [s["last_s"] for s in kept] == [1.4, 40.0, 101.0, 27.0, 1.3, 95.0]
    assert {s["last_at"] for s in kept} == {"2026-12-01T10:00:00+00:00"}  # the build that measured them
    again = _ran(build.BuildLog(str(tmp_path), build.plan(tmp_path), started="2026-12-01T13:00:00+00:00"), demo=2.0)
    again.steps = build.kept(again.steps, build.previous(tmp_path), again.started)
    assert (again.steps[0].last_s, again.steps[0].last_at) == (2.0, "2026-12-01T13:00:00+00:00")
    assert again.steps[1].last_s == 40.0  # the others still the full build's


def test_a_page_only_build_is_estimated_from_how_long_the_command_took_to_start():
    """The page alone is work of the kind the command's start is (loading libraries, first figures): its estimate
    is the start's seconds times the ratio this folder's last page-only builds showed, not a fixed 5 s."""
    est, how = build.page_estimate(True, None, startup_s=5.0)
    assert est == pytest.approx(5.0 * build.STARTUP_RATIO) and "this command took to start" in how
    log = build.BuildLog("out", [], pages=[build.PageTime(6.0, False, "a"), build.PageTime(24.0, True, "b", 4.0),
                                           build.PageTime(30.0, True, "c", 6.0), build.PageTime(21.0, True, "d", 3.0)])
    est, how = build.page_estimate(True, log, startup_s=2.0)  # ratios 6, 5 and 7: their median, 6
    assert est == pytest.approx(12.0) and "last 3 page-only builds" in how
    est, how = build.page_estimate(False, log, step_s=0.05)  # after steps: that kind's own last page
    assert est == 6.0 and "page after steps" in how
    assert build.page_estimate(False, None, step_s=0.05)[0] == build.scaled("page", 0.05)
    assert build.page_estimate(True, log, startup_s=None)[0] == 24.0  # no start time known: the last pages' median
    assert [p.at for p in build.pages(log, 9.0, True, "e", 2.0)] == ["a", "b", "c", "d", "e"]
    assert len(build.pages(build.BuildLog("out", [], pages=[build.PageTime(1, True)] * 9), 9.0, True, "e")) == \
        build.PAGES_KEPT


def test_the_process_knows_how_long_it_has_run():
    import time

    first = build.running_s()
    if first is None:
        pytest.skip("this system does not say when a process started (/proc)")
    time.sleep(0.05)
    assert 0 < first < build.running_s() < 24 * 3600


@pytest.mark.parametrize(("step", "checkpointed", "says"), [
    ("train", True, "to go on, `attnlab train --out {out} --resume` trains on from its checkpoints, then `attnlab "
                    "lesson --build --out {out}` runs what is still missing (the steps done are kept)"),
    ("train", False, "no checkpoint was written yet: `attnlab lesson --build --out {out}` runs what is still missing"),
    ("demo", False, "to go on, `attnlab lesson --build --out {out}` runs what is still missing"),
])
@pytest.mark.parametrize("how", ["the command's own 130", "KeyboardInterrupt"])
def test_ctrl_c_in_a_build_step_is_stopped_with_how_to_go_on_and_exit_130(tmp_path, monkeypatch, capsys, step,
                                                                          checkpointed, says, how):
    """It was "train: failed (exit 130)" and "attnlab lesson: error:", exit 2: the learner's stop told as a failure."""
    import attnlab.cli
    from attnlab.cli import _lesson_build, main
    from attnlab.train import checkpoint

    out = tmp_path / "out"
    out.mkdir()
    if checkpointed:
        checkpoint.path_of(out, "scale", "sqrt").parent.mkdir()
        checkpoint.path_of(out, "scale", "sqrt").write_bytes(b"")
    todo = [build.Step(step, [step, "--out", str(out)], f"{step}.json is missing", 60.0)]
    monkeypatch.setattr(_lesson_build, "_planned", lambda o: (_lesson_build._Log(o, None), todo, 1.0))

    def stopped(argv):  # Ctrl-C in the step: its command returns 130, or the interrupt reaches the build
        if how == "KeyboardInterrupt":
            raise KeyboardInterrupt
        return 130

    monkeypatch.setattr(attnlab.cli, "main", stopped)
    assert main(["lesson", "--build", "--out", str(out)]) == 130
    got = capsys.readouterr()
    text = " ".join(got.out.split())
    print(text, got.err)
    assert f"[1/1] {step}: stopped (Ctrl-C) after 0 s; {says.format(out=out)}" in text
    assert got.err.startswith(f"attnlab lesson: stopped (Ctrl-C) in step 1 of 1, {step}; {says.format(out=out)}")
    assert len(got.err.splitlines()) == 1, got.err  # the step's command said nothing of its own
    assert "failed" not in text + got.err and "error" not in text + got.err
    assert "stopped (Ctrl-C)" in (out / "lesson-build.log").read_text()


def test_the_page_says_it_will_train_and_for_how_long_before_it_does_and_shows_its_steps(tmp_path, monkeypatch):
    """A plain `attnlab lesson` with no training results trained for minutes with one line, "train"."""
    from attnlab.lesson import sources
    from attnlab.train import estimate as train_time

    heard = []
    monkeypatch.setattr(train_time, "estimate", lambda cfg, data: train_time.Estimate(step_s=0.5, log_s=1.0))

    def run(cfg, kind, out, on_step):
        heard.append(f"run {kind}")
        on_step("sqrt" if kind == "scale" else "tied", cfg.steps, cfg.steps, 4.0, 100.0)
        return kind

    monkeypatch.setattr(train, "run", run)

    @contextlib.contextmanager
    def progress(steps, variants):
        heard.append(f"progress {steps} {variants}")
        yield lambda name, step, steps_, loss, rate: heard.append(f"step {name} {step}/{steps_}")

    scale, tie = sources.train(tmp_path, quick=False, say=heard.append, progress=progress)
    cfg = train.PRESETS["tiny"]
    runs = cfg.steps * 0.5 + (cfg.steps // cfg.eval_every + 2) * 1.0  # one run, at the estimate's step and log
    from attnlab.report.fmt import fmt_estimate

    print("\n".join(heard))
    assert heard[0] == (f"train: no train.json and tie_kv.json in {tmp_path}, so the page trains tiny models now: 5 "
                        f"runs of {cfg.steps} steps (timing a few steps first)")
    assert heard[1].startswith(f"train: {fmt_estimate(5 * runs)} on this machine now (500 ms a step); `attnlab train "
                               f"--out {tmp_path}` trains the real models instead, and --quick leaves training out")
    assert heard[2:] == [f"progress {cfg.steps} ['sqrt', 'none', 'inv']", "run scale", f"step sqrt {cfg.steps}/"
                         f"{cfg.steps}", f"progress {cfg.steps} ['untied', 'tied']", "run tie-kv",
                         f"step tied {cfg.steps}/{cfg.steps}"]
    assert (scale.result, tie.result) == ("scale", "tie-kv")
