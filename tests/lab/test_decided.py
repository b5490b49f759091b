"""Verdicts the measurements decide (issue 54): a level's memory rule is read only from peaks whose repeats agree --
measured more where they do not, and "not decided" (never "it did not hold") where they never do; and a function that
fails its grading is not timed at all."""

import contextlib
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
    values = [(3 + i / 5) * MiB for i in range(20)]
    got = M.repeated_peaks(_peaks(values))
    assert len(got) == M.PEAKS + M.MORE_PEAKS and not M.confirmed(got)
    assert M.undecided([Timing(512, 1.0, min(got), peaks=got), Timing(2048, 1.0, 36 * MiB, peaks=[36 * MiB])]) == [512]


def test_a_lengths_timed_calls_stop_at_two_that_agree_and_go_on_to_the_most_where_they_do_not(monkeypatch):
    def clock(times):
        it = iter(times)
        monkeypatch.setattr(M, "time_calls", lambda once, warmup, n: [next(it) for _ in range(n)])

    clock([1.0, 1.04, 9.0])  # within TIMES_AGREE (5 %): a third call would say the same
    assert M.agreed_times(None, 5) == [1.0, 1.04]
    clock([1.0, 1.3, 1.02, 1.25, 1.1, 9.0])  # a stalled call among them: timed as often as it always was
    assert M.agreed_times(None, 5) == [1.0, 1.3, 1.02, 1.25, 1.1]
    clock([2.0, 2.5, 9.0])
    assert M.agreed_times(None, 2) == [2.0, 2.5]  # never more than the length allows


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


def _fitted(peaks_512, at_2048=36.4):
    r = _result(peaks_512, None)
    r.timings[-1] = Timing(2048, 0.2, int(at_2048 * MiB), peaks=[int(at_2048 * MiB)] * 3)
    r.fits = {"memory": M.least_fit({t.seq: t.peaks for t in r.timings})}
    r.exponents = {"memory": r.fits["memory"].exponent}
    return r


def test_peaks_that_disagree_still_decide_where_every_choice_of_repeat_gives_one_verdict():
    growth = levels.find("matrix").growth  # T², within 0.25
    disagree = [int((3.5 + 0.15 * i) * MiB) for i in (3, 0, 5, 8, 1, 6, 2, 7, 4)]  # 3.5 to 4.7 MiB, none twice
    assert M.undecided(_fitted(disagree).timings) == [512]  # no peak seen twice at T = 512
    ok, note = forwards.memory_ok(r := _fitted(disagree, 60), growth)  # every choice within T^1.75..2.25: passes
    assert ok is True and r.fits["memory"].low >= 1.75 and r.fits["memory"].high <= 2.25, note
    assert "varied from call to call, and every choice of one repeat per length gives T^" in note
    assert note.endswith("all within what the level asks")
    ok, note = forwards.memory_ok(r := _fitted(disagree, 8), growth)  # every choice below T^1.75: fails, decided
    assert ok is False and r.fits["memory"].high < 1.75 and note.endswith("none of it within what the level asks")
    ok, note = forwards.memory_ok(r := _fitted(disagree, 45), growth)  # T^1.63 to T^1.84: the range straddles
    assert r.fits["memory"].low < 1.75 < r.fits["memory"].high, r.fits["memory"]
    assert ok is False and note.startswith("not decided: its peak memory at T = 512 differed") and "T^1.6" in note


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


def test_a_passing_function_is_measured_in_a_process_of_its_own_and_the_process_ends(monkeypatch):
    """The graded process's heap is fragmented by the grading (a right matrix form read T = 512 at 2.4 to 3.2 MiB from
    one check to the next, its growth as low as T^1.80 against the level's 1.75): the measurement runs in a new
    process, and that process ends with it (also when the measurement raises: the slow test below)."""
    events = []
    graded = SimpleNamespace(fn=_Right(), given=False)
    clean = SimpleNamespace(fn=SimpleNamespace(lost="it exited with code 1"), given=False)

    @contextlib.contextmanager
    def fresh(learner):
        assert learner is graded
        events.append("started")
        try:
            yield clean
        finally:
            events.append("ended")

    def measure(learner, seqs, budget_s, seed=0):
        assert learner is clean, "measured in the graded process"
        events.append("measured")
        if seqs == M.SEQS and events.count("measured") > 1:
            raise judged.remote.Lost("gone")
        return [Timing(T, 1.0, T * T, peaks=[T * T]) for T in seqs], {"time": None, "memory": None}, "note"

    monkeypatch.setattr(judged, "fresh", fresh)
    monkeypatch.setattr(judged, "measure", measure)
    mod = levels.find("matrix").module()
    *_, timings, fits, how = check._measured(graded, mod, None, 0, 20.0, lambda text: None)
    assert events == ["started", "measured", "ended"] and [t.seq for t in timings] == list(M.SEQS)
    *_, timings, fits, how = check._measured(graded, mod, None, 0, 20.0, lambda text: None)
    assert events[3:] == ["started", "measured", "ended"] and timings == []
    assert how == "not measured: it exited with code 1 while it was measured", how


@pytest.mark.slow
def test_the_fresh_process_is_another_process_and_is_gone_after(tmp_path):
    path = tmp_path / "lab_matrix.py"
    path.write_text("import torch\n\n\ndef attention_matrix(q, k, v):\n    return q\n")
    with judged.open_learner(str(path), "matrix") as learner:
        with judged.fresh(learner) as clean:
            assert clean.fn.process.pid != learner.fn.process.pid and clean.fn.process.poll() is None
            assert (clean.path, clean.name, clean.level) == (learner.path, learner.name, learner.level)
        assert clean.fn.process.poll() is not None and learner.fn.process.poll() is None
        with pytest.raises(judged.remote.Lost), judged.fresh(learner) as again:
            raise judged.remote.Lost("the measurement lost it")
        assert again.fn.process.poll() is not None and learner.fn.process.poll() is None
