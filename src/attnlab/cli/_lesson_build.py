"""`attnlab lesson --build`: run the lesson's missing or stale measurements, each with an estimate and a line when
done (on the terminal and in lesson-build.log), then hand back to `attnlab lesson`, which builds the page."""

from __future__ import annotations

import os
import time
from pathlib import Path


class _Log:
    """Lines to the terminal and to ``out/lesson-build.log``; the measured steps to ``out/lesson-build.json``."""

    def __init__(self, out: Path, log):
        self.out, self.log, self.t0 = out, log, time.perf_counter()
        self.page_t0: float | None = None  # when the page phase began
        self.before = None  # the last build's log in this folder (its steps' times are kept)
        self.page_how = ""  # how the page's time was estimated
        self.startup_s: float | None = None  # the process's seconds up to the estimate (a page-only build's measure)
        self.path = out / "lesson-build.log"
        self._write("w", "")  # before any step: a log that cannot be written stops the build now

    def say(self, line: str) -> None:
        from attnlab.report.terminal import console, escape

        console.print(escape(line))  # "[page]" is a step's name, not rich markup
        self._write("a", f"{time.strftime('%H:%M:%S')} {line}\n")

    def _write(self, mode: str, text: str) -> None:
        """Append (or start) the log; a full disk or a folder in its place is a CannotWrite, one line."""
        from attnlab.results.files import CannotWrite, reason

        try:
            with self.path.open(mode) as f:
                f.write(text)
        except OSError as e:
            raise CannotWrite(self.path, reason(e), None) from None

    def finish(self, page_s: float) -> None:
        """The build's end: ``page_s`` is the page's own collecting; the page phase is timed from its line on."""
        from attnlab.lesson import build
        from attnlab.report.fmt import fmt_estimate
        from attnlab.results import write_json

        if self.page_t0 is not None:
            page_s = max(page_s, time.perf_counter() - self.page_t0)
        self.log.page_s, self.log.total_s = page_s, time.perf_counter() - self.t0
        self.log.load_after = _load()
        self.log.steps = build.kept(self.log.steps, self.before, self.log.started)
        alone = not any(s.seconds is not None for s in self.log.steps)
        self.log.pages = build.pages(self.before, page_s, alone, self.log.started, self.startup_s if alone else None)
        ran = [s for s in self.log.steps if s.seconds is not None]
        parts = ", ".join(f"{s.name} {s.seconds:.0f} s" for s in ran)
        said = f" (estimated {fmt_estimate(self.log.page_estimate_s)})" if self.log.page_estimate_s else ""
        self.say(f"lesson --build: done in {self.log.total_s:.0f} s ({parts}{', ' if parts else ''}page "
                 f"{page_s:.0f} s{said}); wrote {write_json(self.log, self.out / 'lesson-build.json')}")


def _load() -> list[float]:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else []


def _left(done: list, todo: list, page_s: float) -> float:
    """The rest of the build re-estimated: the steps still to run and the page, their estimates scaled by how long
    the steps so far took against theirs."""
    # 30 s of "as estimated" weigh in, so a step of a few seconds does not rescale the rest on its own
    ratio = (sum(s.seconds for s in done) + 30.0) / (sum(s.estimate_s for s in done) + 30.0)
    return ratio * (sum(s.estimate_s for s in todo) + page_s)


def build_steps(out: Path) -> _Log:
    """Run what the default lesson still needs in ``out``; a UsageError (one line) when a step fails, and
    :class:`attnlab.cli.Stopped` when Ctrl-C stops one (with how to go on: the steps done are kept)."""
    from attnlab import cli
    from attnlab.report.fmt import fmt_estimate

    from . import STOPPED, Stopped, UsageError

    try:
        log, todo, page_s = _planned(out)
    except KeyboardInterrupt:  # while the training steps are timed for the estimates
        raise Stopped(f"`attnlab lesson --build --out {out}` starts it again", "before any step ran") from None
    for i, s in enumerate(todo, 1):
        log.say(f"[{i}/{len(todo)}] {s.name}: starting ({fmt_estimate(s.estimate_s)})")
        t0 = time.perf_counter()
        try:
            code = cli.main(s.argv)
        except KeyboardInterrupt:  # between the command's own handlers: stopped all the same
            code = STOPPED
        s.seconds = time.perf_counter() - t0
        if code == STOPPED:  # the step's command said nothing (it ran inside this one): the build says how to go on
            log.say(f"[{i}/{len(todo)}] {s.name}: stopped (Ctrl-C) after {s.seconds:.0f} s; {_going_on(out, s)}")
            raise Stopped(_going_on(out, s), f"in step {i} of {len(todo)}, {s.name}")
        if code:
            log.say(f"[{i}/{len(todo)}] {s.name}: failed (exit {code})")
            raise UsageError(f"--build: `attnlab {' '.join(s.argv)}` failed (exit {code}); its message is above")
        now = _load()
        log.say(f"[{i}/{len(todo)}] {s.name}: done in {s.seconds:.0f} s (estimated {fmt_estimate(s.estimate_s)}); "
                f"{fmt_estimate(_left(todo[:i], todo[i:], page_s))} left, re-estimated from the steps so far"
                + (f" (load {now[0]:.1f})" if now else ""))
    log.say(f"[page] collecting the results and writing lesson.html ({fmt_estimate(page_s)}, {log.page_how})")
    log.page_t0 = time.perf_counter()
    return log


def _going_on(out: Path, step) -> str:
    """How to go on after Ctrl-C stopped ``step``: a training run from its checkpoints, else the build again."""
    from attnlab.train import checkpoint
    from attnlab.train.train import SCALE_VARIANTS, TIE_KV_VARIANTS

    again = f"`attnlab lesson --build --out {out}` runs what is still missing (the steps done are kept)"
    if step.argv[0] != "train":
        return f"to go on, {again}"
    kind, names = ("tie-kv", TIE_KV_VARIANTS) if "tie-kv" in step.argv else ("scale", SCALE_VARIANTS)
    if not any(checkpoint.path_of(out, kind, name).is_file() for name in names):
        return f"no checkpoint was written yet: {again}, training from the start"
    return (f"to go on, `attnlab {' '.join(step.argv)} --resume` trains on from its checkpoints, then {again}")


def _planned(out: Path) -> tuple[_Log, list, float]:
    """(the build's log, the steps to run, the page's estimate): what is missing or stale, each step's estimate
    from a few training steps timed now (when any is to run), the page's from this folder's last pages; said."""
    from datetime import UTC, datetime

    from attnlab.lesson import build
    from attnlab.report.fmt import fmt_estimate
    from attnlab.train import estimate as train_time
    from attnlab.train import train as lab_train

    before = build.previous(out)  # read before the log is started again: its steps' times are kept
    started = datetime.now(UTC).isoformat(timespec="seconds")
    log = _Log(out, None)  # a log that cannot be started (a folder of its name) is said before the plan's timing
    log.before = before
    load = _load()
    steps = build.plan(out)
    choice = None
    if any(s.why for s in steps):  # time a few real steps at 1 and 2 threads: the faster runs the build
        cfg = lab_train.PRESETS["default"]
        data = lab_train.load_corpus(cfg)
        choice = train_time.choose_threads(cfg, data)
        log.say(f"lesson --build: {choice.threads} thread{'s' if choice.threads > 1 else ''}, the faster here now ("
                + ", ".join(f"{n}: {s * 1e3:.0f} ms a training step" for n, s in choice.step_s.items()) + ")")
        est = train_time.estimate(cfg, data)
        sinks_s = None
        if any(s.why for s in steps if s.name == "explore sinks"):  # its own model and form, timed too
            from attnlab.explore import sinks

            sinks_cfg = sinks.config()
            sinks_est = sinks.estimates(sinks_cfg, lab_train.load_corpus(sinks_cfg))
            sinks_s = sinks.timing_s(sinks_est) + sinks.seconds(sinks_est, sinks_cfg)  # the command times, then runs
        loops_s = build.bench_loops_s() if any(s.why for s in steps if s.name == "bench") else None
        steps = build.plan(out, est.seconds(cfg.steps, cfg.eval_every), est.step_s, sinks_s, loops_s)
    todo = [s for s in steps if s.why]
    log.startup_s = build.running_s()
    page_s, log.page_how = build.page_estimate(not todo, before, est.step_s if choice else None, log.startup_s)
    log.log = build.BuildLog(str(out), steps, load_average=load, cpu_count=os.cpu_count(),
                             threads=choice.to_dict() if choice else None, step_s=est.step_s if choice else None,
                             started=started, page_estimate_s=page_s)
    total = sum(s.estimate_s for s in todo) + page_s
    busy = f", load {load[0]:.1f} on {os.cpu_count()} cores" if load else ""
    log.say(f"lesson --build: {len(todo)} of {len(steps)} steps to run, then the page: {fmt_estimate(total)} on this "
            f"machine now{busy}")
    line = build.versions_line(build.other_versions(out, build.REBUILT), "they are made again below")
    if line:
        log.say(f"  {line}")
    for s in steps:
        log.say(f"  {s.name}: {s.why}; {fmt_estimate(s.estimate_s)} (attnlab {' '.join(s.argv)})" if s.why else
                f"  {s.name}: up to date")
    return log, todo, page_s
