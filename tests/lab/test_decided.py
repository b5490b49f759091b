"""Verdicts the measurements decide (issue 54): a level's memory rule is read only from peaks whose repeats agree --
measured more where they do not, and "not decided" (never "it did not hold") where they never do; and a function that
fails its grading is not timed at all."""

from types import SimpleNamespace

import pytest
import torch.nn.functional as F

from attnlab.lab import check, judged, levels
from attnlab.lab import measure as M
from attnlab.lab.levels import forwards
from attnlab.lab.result import Timing
from attnlab.report import exercise

MiB = 2**20


def _peaks(values):
    it = iter(values)
    return lambda: next(it)


def test_a_length_whose_peaks_disagree_is_measured_until_its_least_repeats():
    got = M.repeated_peaks(_peaks([3.2 * MiB, 2.4 * MiB, 3.3 * MiB, 2.4 * MiB, 9 * MiB]))
    assert got == [3.2 * MiB, 2.4 * MiB, 3.3 * MiB, 2.4 * MiB] and M.confirmed(got)
    assert M.repeated_peaks(_peaks([2.4 * MiB] * 5)) == [2.4 * MiB] * M.PEAKS  # agreeing repeats: no more


def test_repeats_that_never_agree_stop_and_are_said_undecided():
    values = [(3 + i / 10) * MiB for i in range(20)]
    got = M.repeated_peaks(_peaks(values))
    assert len(got) == M.PEAKS + M.MORE_PEAKS and not M.confirmed(got)
    assert M.undecided([Timing(512, 1.0, min(got), peaks=got), Timing(2048, 1.0, 36 * MiB, peaks=[36 * MiB])]) == [512]


def _result(peaks_512, p):
    timings = [Timing(128, 0.01, int(0.18 * MiB), peaks=[int(0.18 * MiB)] * 3),
               Timing(512, 0.02, min(peaks_512), peaks=peaks_512),
               Timing(2048, 0.2, int(36.4 * MiB), peaks=[int(36.4 * MiB)] * 3)]
    return SimpleNamespace(exponents={"memory": p}, timings=timings, fits={}, passed=True)


def test_level_2_passes_or_fails_only_where_the_peaks_decide_it():
    growth = levels.find("matrix").growth
    ok, note = forwards.memory_ok(_result([int(2.23 * MiB)] * 3, 1.96), growth)
    assert ok is True and note.startswith("memory grew as T^1.96")
    ok, note = forwards.memory_ok(_result([int(2.23 * MiB)] * 3, 1.2), growth)  # decided, and it did not hold
    assert ok is False and note.startswith("memory grew as T^1.20")
    disagree = [int((2.4 + i / 5) * MiB) for i in range(M.PEAKS + M.MORE_PEAKS)]
    r = _result(disagree, 1.74)  # the T^1.74: a peak of 3.2 MiB once, 2.4 MiB the next
    r.measured_ok, r.measured_note = forwards.memory_ok(r, growth)
    assert r.measured_ok is False and r.measured_note.startswith("not decided: its peak memory at T = 512 differed")
    assert "did not hold" not in exercise.held_text(r, markup=False)


class _Right:
    """A right function that must not be timed: measuring it fails the test."""

    lost = None

    def __call__(self, *args, **kwargs):
        return F.scaled_dot_product_attention(*args, **kwargs)


def test_a_function_that_fails_its_grading_is_not_timed(monkeypatch):
    def never(*a, **k):
        pytest.fail("a function that failed its grading was timed")

    monkeypatch.setattr(judged, "measure", never)
    learner = SimpleNamespace(fn=_Right(), given=False)
    mod = levels.find("flash").module()  # level 4: timed up to T = 8192 when it measures
    said = []
    load, err, timings, fits, how = check._measured(learner, mod, None, 0, 20.0, said.append, passed=False)
    assert timings == [] and how == check.NOT_PASSED and not said and err < 1e-5
