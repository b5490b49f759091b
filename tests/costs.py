"""What each test costs, in CPU seconds, and whether its mark says so (`make test` fails when one does not).

A mark says what a test costs: ``slow`` means it starts a process or was measured over 0.3 s of CPU
(the bound below which it must not be is SLOW_MIN, the bound a test without it must keep is FAST_MAX), and `make
test-fast` leaves it out. Wall time says little of that on a shared machine (a busy core stretches every test), so the
cost is CPU time: the test process's own, and every process it started -- the children it waited for, and those
still running (a judged process, a browser), read from /proc before and after. A process that was running before the
test began is not charged to it (a session's browser, a judge kept for the next test): its work then is another's.
Setup and teardown count: a session fixture's first user pays for it, so a test that needs a session fixture
measured slow is slow too; and a test marked fast is not held to a fixture it happened to set up for the tests that
share it (which test comes first is xdist's choice, not the test's cost). Likewise a cost that a worker pays once
and keeps -- an import of seconds (transformers), a judge's process, a training worker -- lands on whichever test
needs it first: a test whose slowness is that says so, ``@pytest.mark.slow(first="what it pays for")``, and is not
held to SLOW_MIN when it ran after another test had paid (it is still slow when it runs alone: pytest -k).

Two costs are not a test's own and are not judged, each said in the summary: a test that ends while the machine is
crowded past its CPUs (BUSY_LOAD: there CPU time grows with the crowd), and a fast-marked test over FAST_MAX during
which a process another test had started ended (its work since the test began is in the count, and cannot be split
from the test's).

With ``--check-costs`` (the Makefile's test targets pass it) the run ends with a table of the tests whose mark does
not fit their cost -- fast-marked over FAST_MAX, slow-marked under SLOW_MIN, each past a factor of 1 + NOISE (below)
-- and fails when it is not empty. The two limits sit far apart on purpose: a test between them may carry either
mark, so no verdict flips because the machine is busy (CPU time grows a little with the load; wall time grows with
it without bound).

A CPU second is not the same on every machine, nor on one machine all day (a neighbour on the host's other hyper-
thread slows every instruction): each process that runs tests times a fixed piece of Python (:func:`calibrate`) at
its start and again every CALIBRATE_EVERY seconds, and a test's cost is judged in the seconds of the machine the
marks were fitted on (its CPU time divided by the process's current speed, the median of its last readings). And a
test's cost varies from run to run beyond that (which worker pays for an import, the allocator, the order): a mark is
failed only when its cost is past its bound by more than a factor of 1 + NOISE; one past its bound by less is listed
as near it, not failed -- a verdict inside its own noise would flip from run to run.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from pathlib import Path

import pytest

FAST_MAX = 2.0  # CPU seconds a test not marked slow may take
SLOW_MIN = 0.2  # CPU seconds below which a slow-marked test is not slow
# a session or module fixture whose setup took this much (in the reference's seconds) lets the tests that use it be
SLOW_FIXTURE = 2.0  # slow ...
HEAVY_FIXTURE = 5.0  # ... and one of this much makes them slow (between the two, either mark fits)
# a test that ends with the 1-minute load over this is not held to its mark: on a machine crowded past its CPUs (the
# suite's own two workers, and more) CPU time grows -- threads that spin while they wait, caches shared -- and a
# mark's verdict must not flip with the load
# (COSTS_BUSY_LOAD sets another: tests/test_costs.py judges its own burnt seconds at any load)
BUSY_LOAD = float(os.environ.get("COSTS_BUSY_LOAD") or 1.5 * (os.cpu_count() or 2) + 1)
# a test's cost from run to run on one machine: two pairs of make test runs (AMD EPYC, 2 cores) put 90 % of the
# tests over 0.3 s within 0.49-1.95 and 0.80-2.07 times their other run's CPU time (which worker pays an import, the
# order, the load): a cost within a factor of 1 + NOISE of its bound is inside that noise
NOISE = float(os.environ.get("COSTS_NOISE") or 1.0)
REFERENCE_S = 0.108  # calibrate()'s CPU seconds on the machine the marks were fitted on (AMD EPYC, AVX-512, quiet)
CALIBRATE_EVERY = 60.0  # wall seconds between two readings of a process's speed
_PROC = Path("/proc")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _work() -> int:
    d: dict[int, int] = {}
    n = 0
    for i in range(400_000):
        d[i % 977] = d.get(i % 977, 0) + i
        n += len(str(i))
    return n


def calibrate(repeats: int = 3) -> float:
    """This process's speed against the machine the marks were fitted on: the CPU seconds a fixed piece of Python
    takes here (the least of ``repeats``) over REFERENCE_S -- 2.0 means a CPU second here does half the work."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        _work()
        best = min(best, time.process_time() - t)
    return max(best, 1e-3) / REFERENCE_S


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in (_PROC / str(pid) / "task").iterdir():
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    except OSError:
        return []
    return out


def _stat_cpu(pid: int) -> tuple[float, float]:
    """(utime + stime, cutime + cstime) of a live process -- its own CPU seconds, and those of the children it
    reaped -- ((0, 0) when it is gone)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0, 0.0
    f = [int(x) for x in text[text.rindex(")") + 2:].split()[11:15]]  # after "pid (comm) "
    return (f[0] + f[1]) / _TICK, (f[2] + f[3]) / _TICK


def snapshot() -> tuple[float, dict[int, tuple[float, float]]]:
    """(CPU seconds used so far by this process and the children it reaped, {pid: (its own CPU seconds so far, its
    reaped children's)} of every live descendant)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
    live: dict[int, tuple[float, float]] = {}
    if not _PROC.is_dir():
        return own, live
    todo = _children(os.getpid())
    while todo:
        pid = todo.pop()
        if pid in live:
            continue
        live[pid] = _stat_cpu(pid)
        todo += _children(pid)
    return own, live


def spent(before: tuple[float, dict]) -> float:
    return spent_and_ended(before)[0]


def spent_and_ended(before: tuple[float, dict]) -> tuple[float, bool]:
    """CPU seconds used since ``before`` (a :func:`snapshot`) by this process and the processes started since: a
    process that was already running (a session's browser, a judge kept for the next test, a fork server) is not
    this test's, and its own work meanwhile is left out -- it would charge a fast test with another's, by the order
    the tests happen to run in; the processes it started and reaped meanwhile (a fork server's ranks) are counted.
    One that ended meanwhile is taken out at what it had used before (its work since then is in the count, which
    cannot split it). The second value says one did, or that a kept process worked meanwhile (its work, left out,
    may be this test's: a judge kept from another test, judging this one's function)."""
    own0, live0 = before
    own1, live1 = snapshot()
    gone = sum(a + b for pid, (a, b) in live0.items() if pid not in live1)  # reaped since: in own1 whole
    new = sum(a + b for pid, (a, b) in live1.items() if pid not in live0)
    reaped = sum(live1[pid][1] - b for pid, (_, b) in live0.items() if pid in live1)
    ended = any(pid not in live1 for pid in live0)
    kept = sum(live1[pid][0] - a for pid, (a, _) in live0.items() if pid in live1)  # a kept process's work meanwhile
    return max(0.0, own1 - own0 - gone + new + reaped), ended or kept > SLOW_MIN


class Costs:
    """The plugin: measures in each process that runs tests, judges the marks where the reports meet."""

    def __init__(self, check: bool):
        self.check = check
        self.start: dict[str, float] = {}
        self.fixtures: dict[str, float] = {}  # fixture name -> CPU seconds its setup took (session/module scope)
        self.busy: list[tuple[str, float]] = []  # tests that ended with the load over BUSY_LOAD: not judged
        self.unsplit: list[tuple[str, float]] = []  # fast tests over FAST_MAX that another's process ended in
        self.wrong: list[tuple[str, str, float]] = []  # (nodeid, mark, cpu)
        self.seen: dict[str, float] = {}
        self.shared = 0.0  # CPU seconds of session and module fixtures' setups so far, in this process
        self.shared_at: dict[str, float] = {}
        self.near: list[tuple[str, str, float]] = []  # (nodeid, mark, cpu in reference seconds): past, within NOISE
        self.speeds: list[float] = []  # this process's readings of its speed (calibrate)
        self.speeds_seen: list[float] = []  # the speeds the judged tests were measured at (where the reports meet)
        self.calibrated_at = -float("inf")

    def speed(self) -> float:
        """This process's current speed: read again when CALIBRATE_EVERY seconds have passed (the reading's own
        CPU is taken before the test's count begins), the median of the last five readings."""
        if not self.check:
            return 1.0
        if os.environ.get("COSTS_SPEED"):  # a speed set from outside (tests/test_costs.py judges burnt seconds)
            return float(os.environ["COSTS_SPEED"])
        if time.monotonic() - self.calibrated_at >= CALIBRATE_EVERY:
            self.speeds = (self.speeds + [calibrate(3 if not self.speeds else 1)])[-5:]
            self.calibrated_at = time.monotonic()
        return statistics.median(self.speeds)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope not in ("session", "module", "package"):
            yield
            return
        speed = statistics.median(self.speeds) if self.speeds else self.speed()  # not read again here: a reading's
        t0 = snapshot()  # CPU would be counted in the test whose setup this is
        yield
        cost = spent(t0)
        self.fixtures[fixturedef.argname] = max(self.fixtures.get(fixturedef.argname, 0.0), cost / speed)
        self.shared += cost

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        item.user_properties.append(("speed", round(self.speed(), 3)))
        self.start[item.nodeid] = snapshot()
        self.shared_at[item.nodeid] = self.shared

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        if call.when == "teardown" and item.nodeid in self.start:
            cpu, ended = spent_and_ended(self.start.pop(item.nodeid))
            shared = self.shared - self.shared_at.pop(item.nodeid, self.shared)  # fixtures this test happened to set up
            names = getattr(item, "fixturenames", ())
            heavy = sorted(f for f in names if self.fixtures.get(f, 0.0) >= SLOW_FIXTURE)
            item.user_properties.append(("heavy_fixtures", [f for f in heavy if self.fixtures[f] >= HEAVY_FIXTURE]))
            item.user_properties.append(("heavy_past_noise",  # heavy beyond the run-to-run noise
                                         [f for f in heavy if self.fixtures[f] >= HEAVY_FIXTURE * (1 + NOISE)]))
            item.user_properties.append(("cpu_s", round(cpu, 3)))
            item.user_properties.append(("shared_s", round(shared, 3)))
            item.user_properties.append(("slow_fixtures", heavy))
            mark = item.get_closest_marker("slow")
            item.user_properties.append(("first", bool(mark and mark.kwargs.get("first"))))
            item.user_properties.append(("ended", ended))
            item.user_properties.append(("load", os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0))
        yield

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown":
            return
        props = dict(report.user_properties)
        if "cpu_s" not in props:
            return
        self.seen[report.nodeid] = props["cpu_s"]
        if props.get("load", 0.0) > BUSY_LOAD:  # CPU time grows on a crowded machine: not this test's cost
            self.busy.append((report.nodeid, props["load"]))
            return
        speed = props.get("speed") or 1.0
        self.speeds_seen.append(speed)
        cpu = props["cpu_s"] / speed  # in the seconds of the machine the marks were fitted on
        slow = "slow" in report.keywords
        own = cpu - props.get("shared_s", 0.0) / speed  # a fixture the next tests share is not this test's own cost
        if not slow and (own > FAST_MAX or props.get("heavy_fixtures")):  # ... but one of many seconds makes it slow
            if props.get("ended") and not props.get("heavy_fixtures"):  # another test's process ended in it: its
                self.unsplit.append((report.nodeid, cpu))  # work since the test began is in the count, unsplit
                return
            past = own > FAST_MAX * (1 + NOISE) or props.get("heavy_past_noise")
            (self.wrong if past else self.near).append((report.nodeid, "fast", cpu))
        elif slow and cpu < SLOW_MIN and not props.get("slow_fixtures") and not props.get("first"):
            if props.get("ended"):  # its work ran in a process kept from another test (a judge, a training worker)
                self.unsplit.append((report.nodeid, cpu))
                return
            (self.wrong if cpu < SLOW_MIN / (1 + NOISE) else self.near).append((report.nodeid, "slow", cpu))

    def pytest_terminal_summary(self, terminalreporter):
        if not self.check or not self.seen:
            return
        tr = terminalreporter
        total = sum(self.seen.values())
        tr.write_sep("-", f"CPU time: {total:.0f} s over {len(self.seen)} tests (--check-costs)")
        if self.speeds_seen:
            lo, hi = 1 / max(self.speeds_seen), 1 / min(self.speeds_seen)
            tr.write_line(f"this machine's speed against the one the marks were fitted on: a CPU second here does "
                          f"{lo:.2f}-{hi:.2f} of one there (tests/costs.py's calibration); the costs below are in its "
                          "seconds")
        if self.near:
            tr.write_line(f"{len(self.near)} test(s) past their mark's bound by less than the run-to-run noise "
                          f"(a factor of {1 + NOISE:g}), listed, not failed:")
            for nodeid, mark, cpu in sorted(self.near, key=lambda w: -w[2])[:10]:
                tr.write_line(f"  {cpu:7.2f} s  marked {mark:4s}  {nodeid}")
        if self.busy:
            worst = max(load for _, load in self.busy)
            tr.write_line(f"{len(self.busy)} test(s) not held to their mark: they ended while the machine was busy "
                          f"(1-minute load over {BUSY_LOAD:g}, up to {worst:.1f}, on {os.cpu_count()} CPUs), where "
                          "CPU time grows with the crowd")
        if self.unsplit:
            tr.write_line(f"{len(self.unsplit)} test(s) not held to their mark: a process another test started "
                          "ended or worked during them, so their count cannot be split from it: "
                          + ", ".join(f"{n} ({c:.1f} s)" for n, c in self.unsplit[:5]))
        if not self.wrong:
            tr.write_line(f"every mark fits its cost: fast <= {FAST_MAX:g} s, slow >= {SLOW_MIN:g} s of CPU"
                          + (f" (or within a factor of {1 + NOISE:g} of it)" if self.near else ""))
            return
        tr.write_line(f"{len(self.wrong)} test(s) whose mark does not fit their CPU time, past the noise "
                      f"(fast-marked over {FAST_MAX * (1 + NOISE):g} s, slow-marked under "
                      f"{SLOW_MIN / (1 + NOISE):.2g} s):")
        for nodeid, mark, cpu in sorted(self.wrong, key=lambda w: -w[2]):
            tr.write_line(f"  {cpu:7.2f} s  marked {mark:4s}  {nodeid}")

    def pytest_sessionfinish(self, session, exitstatus):
        path = session.config.getoption("--costs-json")
        if path and not hasattr(session.config, "workerinput"):
            import json

            Path(path).write_text(json.dumps(self.seen, indent=0, sort_keys=True))
        worker = hasattr(session.config, "workerinput")  # pytest-xdist: the controller judges the marks
        if self.check and self.wrong and not worker and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser):
    parser.addoption("--check-costs", action="store_true",
                     help="fail the run when a test's mark does not fit its CPU time (tests/costs.py)")
    parser.addoption("--costs-json", metavar="PATH", help="write each test's CPU seconds to PATH (tests/costs.py)")


def pytest_configure(config):
    config.pluginmanager.register(Costs(config.getoption("--check-costs")), "attnlab-costs")
