""""The check took" is the wall time the learner waited: the whole command, from the process's start (issue 54)."""

import subprocess
import sys
import time

import pytest

from attnlab.cli import _clock


def test_a_command_called_in_a_running_process_is_counted_from_its_call():
    time.sleep(0.05)
    _clock.begin(whole_process=False)
    assert _clock.waited() < 0.05


def test_the_age_of_this_process_is_read():
    age = _clock.process_age()
    assert age is None or age > 0.1  # the test runner has run for longer than that


@pytest.mark.slow
def test_a_command_that_is_the_process_counts_its_start_and_imports():
    """The interpreter sleeps 1 s before the command begins (as importing torch takes seconds): the wait says so."""
    code = ("import time; time.sleep(1.0)\nfrom attnlab.cli import _clock\n_clock.begin(whole_process=True)\n"
            "print(_clock.waited())")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    took = time.perf_counter() - t0
    waited = float(out.stdout)
    if _clock.process_age() is not None:  # where /proc says when a process started
        assert 1.0 <= waited <= took + 0.05


def test_only_a_command_whose_time_is_kept_ends_its_process_at_once():
    assert _clock.ends_at_once(["lab"]) and not _clock.ends_at_once(["verify"]) and not _clock.ends_at_once([])


@pytest.mark.slow
def test_a_command_that_ends_at_once_still_says_everything_and_its_exit_code(tmp_path):
    r = subprocess.run([sys.executable, "-m", "attnlab", "lab", "check", "nothere.py"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().endswith("nothere.py: no such file; `attnlab lab start` writes "
                                                          "attention_lab.py")
