"""The thread count a run uses is chosen from its own steps: the faster count wins, and it is chosen again when the
load changes; the build's first choice times real steps at each count in turns."""

import pytest
import torch

from attnlab.train import estimate, threads
from attnlab.train.train import PRESETS, load_corpus


@pytest.fixture
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _run(picker, steps: int, cost) -> list[int]:
    """Drive ``picker`` over ``steps`` steps whose time is ``cost(step, threads)``; the count each step ran at."""
    used = []
    for s in range(steps):
        picker.before(s)
        used.append(torch.get_num_threads())
        picker.after(s, cost(s, used[-1]))
    return used


def test_the_faster_count_is_used_and_chosen_again_when_the_load_changes(keep_threads, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    p = threads.Picker((1, 2), every=10)
    busy = lambda s, n: (0.9 if n == 1 else 5.0) if s < 20 else (0.5 if n == 1 else 0.3)  # noqa: E731
    used = _run(p, 40, busy)
    assert used[:4] == [1, 2, 1, 2] and set(used[4:10]) == {1}  # two of each, then the faster: 1 thread
    assert used[10] == 2 and set(used[11:20]) == {1}  # one trial of the other count an interval
    assert used[20] == 2 and set(used[21:30]) == {2}  # the load fell: 2 threads are faster now, and kept
    assert [c["threads"] for c in p.choices] == [1, 1, 2, 2] and p.choices[0]["step_s"] == {"1": 0.9, "2": 5.0}


def test_one_core_has_nothing_to_choose(keep_threads, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    p = threads.Picker((1, 2), every=5)
    assert _run(p, 12, lambda s, n: 0.1) == [1] * 12 and p.choices == []


def test_choose_threads_times_real_steps_in_turns(keep_threads):
    cfg = PRESETS["tiny"]
    c = estimate.choose_threads(cfg, load_corpus(cfg), rounds=1, steps=2)
    import os

    assert set(c.step_s) == {str(n) for n in (1, 2) if n <= os.cpu_count()} and all(s > 0 for s in c.step_s.values())
    assert str(c.threads) == min(c.step_s, key=c.step_s.get) and torch.get_num_threads() == c.threads
    assert len(c.load_before) == 3 and len(c.load_after) == 3


def test_a_round_slowed_by_other_work_does_not_choose_the_threads(keep_threads, monkeypatch):
    """One round of 2 threads ran beside a burst of other work (0.3 s a step): the median of its two rounds read it
    half in and chose 1 thread; each count's step is the least of its rounds."""
    import os
    from types import SimpleNamespace

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    steps = iter([0.064, 0.3, 0.065, 0.046])  # turns: 1, 2, 1, 2 threads
    monkeypatch.setattr(estimate, "estimate", lambda *a, **k: SimpleNamespace(step_s=next(steps)))
    c = estimate.choose_threads(None, None, rounds=2)
    assert c.threads == 2 and c.step_s == {"1": 0.064, "2": 0.046} and torch.get_num_threads() == 2
