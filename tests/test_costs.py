"""The mark check (tests/costs.py) fails a run whose marks do not fit their CPU time, and only then."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# burnt CPU seconds are the same at any load and any speed: judge them at any, and at the bounds themselves
ENV = {**os.environ, "COSTS_BUSY_LOAD": "1e9", "COSTS_SPEED": "1", "COSTS_NOISE": "0"}

FILE = '''
import time

import pytest


def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass


def test_fast_but_burns():
    burn(2.3)


@pytest.mark.slow
def test_slow_but_idle():
    pass


@pytest.mark.slow(first="what the first test of a worker pays for")
def test_slow_when_first():
    pass


def test_fast_and_fast():
    burn(0.05)


@pytest.mark.slow
def test_slow_and_slow():
    burn(0.3)
'''


@pytest.mark.slow  # a pytest process of its own, and 2.7 s of CPU burnt on purpose
def test_a_mark_that_does_not_fit_its_cpu_fails_the_run_and_is_listed(tmp_path):
    (tmp_path / "test_marks.py").write_text(FILE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a slow test\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.costs", "--check-costs", "-p",
                        "no:cacheprovider", str(tmp_path / "test_marks.py"), "--rootdir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env=ENV)
    print(r.stdout[-2000:], r.stderr[-1000:])
    listed = [line.split()[-1].split("::")[-1] for line in r.stdout.splitlines() if "  marked " in line]
    assert sorted(listed) == ["test_fast_but_burns", "test_slow_but_idle"], listed
    assert r.returncode == 1 and "5 passed" in r.stdout
    ok = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.costs", "--check-costs", "-p",
                         "no:cacheprovider", str(tmp_path / "test_marks.py"), "--rootdir", str(tmp_path), "-k",
                         "first or _and_"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=ENV)
    print(ok.stdout[-600:])
    assert ok.returncode == 0 and "every mark fits its cost" in ok.stdout, ok.stdout[-600:]


class _Report:
    def __init__(self, nodeid, slow, **props):
        self.when, self.nodeid = "teardown", nodeid
        self.keywords = {"slow": 1} if slow else {}
        self.user_properties = list({"shared_s": 0.0, "slow_fixtures": [], "heavy_fixtures": [], "first": False,
                                     "ended": False, "load": 0.5, **props}.items())


@pytest.fixture
def noise(monkeypatch):
    """The run-to-run noise these tests are written at (COSTS_NOISE may set another for a run)."""
    from tests import costs

    monkeypatch.setattr(costs, "NOISE", 1.0)
    return 1.0


def test_a_busy_machine_or_another_tests_process_ending_leaves_a_mark_unjudged_and_said(noise):
    from tests.costs import BUSY_LOAD, Costs

    c = Costs(check=True)
    c.pytest_runtest_logreport(_Report("t::fast_over", False, cpu_s=5.0))
    c.pytest_runtest_logreport(_Report("t::fast_over_busy", False, cpu_s=3.0, load=BUSY_LOAD + 1))
    c.pytest_runtest_logreport(_Report("t::slow_under_busy", True, cpu_s=0.01, load=BUSY_LOAD + 1))
    c.pytest_runtest_logreport(_Report("t::fast_over_ended", False, cpu_s=3.0, ended=True))
    c.pytest_runtest_logreport(_Report("t::slow_under_ended", True, cpu_s=0.01, ended=True))
    c.pytest_runtest_logreport(_Report("t::slow_under", True, cpu_s=0.01))
    assert [w[0] for w in c.wrong] == ["t::fast_over", "t::slow_under"]
    assert [b[0] for b in c.busy] == ["t::fast_over_busy", "t::slow_under_busy"]
    assert [u[0] for u in c.unsplit] == ["t::fast_over_ended", "t::slow_under_ended"]


def test_a_cost_is_judged_in_the_reference_machines_seconds_and_within_its_noise_is_listed_not_failed(noise):
    from tests.costs import FAST_MAX, SLOW_MIN, Costs

    NOISE = noise
    c = Costs(check=True)
    c.pytest_runtest_logreport(_Report("t::fast_on_a_slow_machine", False, cpu_s=FAST_MAX * 1.8, speed=2.0))
    c.pytest_runtest_logreport(_Report("t::slow_on_a_fast_machine", True, cpu_s=SLOW_MIN * 0.6, speed=0.5))
    c.pytest_runtest_logreport(_Report("t::fast_near", False, cpu_s=FAST_MAX * (1 + NOISE / 2)))
    c.pytest_runtest_logreport(_Report("t::slow_near", True, cpu_s=SLOW_MIN / (1 + NOISE / 2)))
    c.pytest_runtest_logreport(_Report("t::fast_past", False, cpu_s=FAST_MAX * (1 + NOISE) * 1.1))
    c.pytest_runtest_logreport(_Report("t::slow_past", True, cpu_s=SLOW_MIN / (1 + NOISE) * 0.9))
    c.pytest_runtest_logreport(_Report("t::fast_past_on_a_fast_machine", False, cpu_s=FAST_MAX * 1.1, speed=0.5))
    # a fixture its tests share, in this machine's seconds, taken out of the test's own in the same units
    # (own 10/2 - 4/2 = 3 s: near; the shared part not divided would read 1 s, neither divided 6 s)
    c.pytest_runtest_logreport(_Report("t::fast_with_shared", False, cpu_s=FAST_MAX * 5, shared_s=FAST_MAX * 2,
                                       speed=2.0))
    assert [w[0] for w in c.wrong] == ["t::fast_past", "t::slow_past", "t::fast_past_on_a_fast_machine"], c.wrong
    assert [n[0] for n in c.near] == ["t::fast_near", "t::slow_near", "t::fast_with_shared"], c.near


def test_the_calibration_takes_the_least_of_its_readings_and_a_process_reads_it_again_each_minute(monkeypatch):
    from tests import costs

    clock = iter([0.0, 0.3, 1.0, 1.2, 2.0, 2.25])  # three readings of 0.3, 0.2 and 0.25 CPU seconds
    monkeypatch.setattr(costs.time, "process_time", lambda: next(clock))
    monkeypatch.setattr(costs, "_work", lambda: 0)
    assert costs.calibrate(3) == pytest.approx(0.2 / costs.REFERENCE_S)  # the least: others' work only slows one
    monkeypatch.delenv("COSTS_SPEED", raising=False)
    readings = iter([1.0, 3.0, 1.2, 1.1])
    monkeypatch.setattr(costs, "calibrate", lambda repeats=3: next(readings))
    now = [0.0]
    monkeypatch.setattr(costs.time, "monotonic", lambda: now[0])
    c = costs.Costs(check=True)
    assert c.speed() == 1.0 and c.speed() == 1.0  # read once, kept within the minute
    now[0] = costs.CALIBRATE_EVERY
    assert c.speed() == 2.0  # read again: the median of 1.0 and 3.0
    now[0] = 2 * costs.CALIBRATE_EVERY
    assert c.speed() == 1.2  # the median of the last readings: one slow reading moves it little
    assert costs.Costs(check=False).speed() == 1.0  # no check: nothing read


def test_the_calibration_reads_this_processs_speed():
    from tests.costs import calibrate

    speed = calibrate(repeats=1)
    print(f"speed {speed:.2f} of the machine the marks were fitted on")
    assert 0.1 < speed < 20
