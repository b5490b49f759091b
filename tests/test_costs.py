"""The mark check (tests/costs.py) fails a run whose marks do not fit their CPU time, and only then."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "COSTS_BUSY_LOAD": "1e9"}  # burnt CPU seconds are the same at any load: judge them at any

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


def test_a_busy_machine_or_another_tests_process_ending_leaves_a_mark_unjudged_and_said():
    from tests.costs import BUSY_LOAD, Costs

    c = Costs(check=True)
    c.pytest_runtest_logreport(_Report("t::fast_over", False, cpu_s=3.0))
    c.pytest_runtest_logreport(_Report("t::fast_over_busy", False, cpu_s=3.0, load=BUSY_LOAD + 1))
    c.pytest_runtest_logreport(_Report("t::slow_under_busy", True, cpu_s=0.01, load=BUSY_LOAD + 1))
    c.pytest_runtest_logreport(_Report("t::fast_over_ended", False, cpu_s=3.0, ended=True))
    c.pytest_runtest_logreport(_Report("t::slow_under_ended", True, cpu_s=0.01, ended=True))
    c.pytest_runtest_logreport(_Report("t::slow_under", True, cpu_s=0.01))
    assert [w[0] for w in c.wrong] == ["t::fast_over", "t::slow_under"]
    assert [b[0] for b in c.busy] == ["t::fast_over_busy", "t::slow_under_busy"]
    assert [u[0] for u in c.unsplit] == ["t::fast_over_ended", "t::slow_under_ended"]
