"""A case's time budget is the function's own (attnlab.judge.apart.pace): its process's CPU time, not the machine's
wall clock (issue 54). A function the machine holds back is waited for, one that uses its budget is a hang, one
that waits is a hang, and only a function held back past the ceiling twice is said to be the machine's, in words
that name the load and never a cause."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time

import pytest

from attnlab.judge import verify
from attnlab.judge.apart import pace, remote
from attnlab.judge.cases import Case
from attnlab.judge.diagnose import diagnose

CASE = Case("basic", batch=(1,), H=1, L=8, E=8, is_causal=True)


def test_a_function_held_back_by_the_machine_has_not_used_its_budget():
    held = pace.Spent(10.0, wall=40.0, cpu=3.0, load=14.0, cores=2)  # a fifth of a core for 40 s: held back
    assert held.own == 3.0 and not held.used and not held.waited
    assert held.ceiling == 10.0 * pace.STRETCH_MAX and not held.busy  # still waited for: 40 s < 120 s
    held.wall = 120.0
    assert held.busy and held.words().startswith("the machine is busy: load 14 on 2 cores; your function had 3 s")


def test_the_busy_line_says_the_budget_is_a_set_one_and_how_it_was_set_with_only_what_was_measured():
    """It said "of a budget of 10 s": not whose time set it. No reference runs beside the function: the budget is a
    set number of its own CPU seconds -- said as one, with how it was set and how long its wall time was allowed."""
    held = pace.Spent(10.0, wall=120.0, cpu=3.0, load=14.0, cores=2, basis="10 s at the basic case's size")
    assert held.busy and held.words() == (
        "the machine is busy: load 14 on 2 cores; your function had 3 s of its own in 120 s of waiting, of a budget "
        "of 10 s of its own CPU time (a set budget, not a reference's time: 10 s at the basic case's size), waited "
        "for up to 12 times that")
    assert verify.limit_basis(CASE, 10.0) == "10 s at the basic case's size"
    big = Case("long", batch=(2,), H=4, L=128, E=8)
    assert verify.limit_basis(big, 10.0) == "10 s at the basic case's size, 4 times that for this case's work"


def test_an_endless_loop_uses_its_budget_at_any_load():
    for load, share in ((0.1, 1.0), (9.0, 0.2)):
        s = pace.Spent(10.0, wall=10.0 / share, cpu=10.0, load=load, cores=2)
        assert s.used and not s.busy and "whole budget" in s.words()


def test_a_function_that_waits_is_ended_soon_and_never_called_busy():
    s = pace.Spent(10.0, wall=15.0, cpu=0.02, load=14.0, cores=2)
    assert s.waited and s.ceiling == 10.0 * pace.STRETCH and not s.busy and s.words().startswith("it waited")


def test_without_the_cpu_time_the_load_stands_for_it():
    s = pace.Spent(10.0, wall=30.0, cpu=None, load=14.0, cores=2)  # 7.5 times slower than idle at load 14
    assert s.own == pytest.approx(4.0) and not s.used and s.ceiling == pytest.approx(10.0 * 1.5 * 7.5)
    assert pace.Spent(10.0, wall=12.0, cpu=None, load=0.0, cores=2).used  # idle: its wall time is its own


def test_the_cpu_time_of_a_process_is_read():
    t0 = pace.cpu_seconds(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert pace.cpu_seconds(os.getpid()) - t0 >= 0.15


BUSY = textwrap.dedent("""
    import time
    import torch.nn.functional as F

    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        end = time.process_time() + {cpu}
        while time.process_time() < end:  # {cpu} s of its own CPU time
            pass
        return F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale=scale)
""")


def _judged(tmp_path, cpu: float) -> remote.Remote:
    (tmp_path / "mine.py").write_text(BUSY.format(cpu=cpu))
    return remote.start({"file": str(tmp_path / "mine.py"), "function": "attention", "what": "mine", "threads": 1},
                        cwd=str(tmp_path))


def _hold(fn: remote.Remote, stop: threading.Event, run_s: float, stopped_s: float, after_cpu: float = 0.05):
    """Stop and continue the judged process (whichever it is now: a retry starts another) in turns, ``run_s``
    running and ``stopped_s`` stopped, once it has had ``after_cpu`` s of CPU in its case -- a machine that gives
    it a share of a core."""
    seen: dict[int, float] = {}
    while not stop.is_set():
        pid = fn.process.pid
        cpu = pace.cpu_seconds(pid)
        if cpu is None or cpu - seen.setdefault(pid, cpu) < after_cpu:
            time.sleep(0.005)
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
            stop.wait(stopped_s)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            continue
        stop.wait(run_s)


@pytest.mark.slow
def test_a_case_the_machine_holds_back_passes_on_its_own_time(tmp_path):
    """0.15 s of CPU a call (three calls: with gradients, under no_grad, under inference_mode) given a fifth of a
    core (8 busy processes on 2 cores): over 2 s of wall, past the old 1 s deadline,
    which failed it as a hang."""
    with _judged(tmp_path, 0.15) as fn:
        stop = threading.Event()
        holder = threading.Thread(target=_hold, args=(fn, stop, 0.05, 0.2))
        holder.start()
        try:
            t0 = time.perf_counter()
            r = verify.verify({"mine": fn}, [CASE], timeout=1.0, backward=False)
            took = time.perf_counter() - t0
        finally:
            stop.set()
            holder.join()
    assert [row.status for row in r.rows] == ["pass"], r.rows[0].detail
    assert took > 1.5  # it was held back past the old deadline, and waited for


@pytest.mark.slow
def test_an_endless_loop_is_still_a_hang(tmp_path):
    with _judged(tmp_path, 1e9) as fn:
        r = verify.verify({"mine": fn}, [CASE, Case("causal", is_causal=True)], timeout=0.5, backward=False)
    assert [row.status for row in r.rows] == ["fail", "skipped"]
    assert r.rows[0].facts.kind == "timeout" and "twice (it used its whole budget" in r.rows[0].detail
    assert [d.key for d in diagnose(r, "mine")] == ["hangs"]


@pytest.mark.slow
def test_a_case_held_back_past_the_ceiling_twice_says_the_machine_is_busy(tmp_path, monkeypatch):
    """A seventh of a core, twice (the first try and its retry): not decided, said as the machine's, never a hang.
    The ceiling is 4 times the budget here (12 in the judge), so that a seventh of a core -- more or less, on a busy
    machine -- is clear of both edges: under the budget of its own by the ceiling, and well over a wait's share."""
    monkeypatch.setattr(pace, "STRETCH_MAX", 4.0)
    with _judged(tmp_path, 5.0) as fn:
        stop = threading.Event()
        holder = threading.Thread(target=_hold, args=(fn, stop, 0.04, 0.24))
        holder.start()
        try:
            r = verify.verify({"mine": fn}, [CASE], timeout=0.3, backward=False)
        finally:
            stop.set()
            holder.join()
    row = r.rows[0]
    assert row.status == "fail" and row.facts.kind == "busy", row.detail
    assert row.detail.startswith("not decided: the machine is busy") and "twice" in row.detail
    # the budget, said with how it was set, where the machine's time ran out: no reference's time is made up
    assert "of a budget of 0.3 s of its own CPU time (a set budget, not a reference's time: 0.3 s at the basic " \
           "case's size), waited for up to 4 times that" in row.detail, row.detail
    found = diagnose(r, "mine")
    assert [d.key for d in found] == ["busy"] and "endless loop" not in found[0].text
    assert found[0].text.startswith("not a cause in your function: the machine is busy")


def test_a_level_s_own_case_that_runs_out_names_the_machine_or_a_hang():
    """Levels 3, 5 and 6 (cases of their own): "is there an endless loop" only where the function used its budget or
    waited; the machine's load where it was held back -- and never "the failures fit no pattern"."""
    from attnlab.lab.levels import own

    busy = remote.Lost("no answer", True, pace.Spent(20.0, wall=240.0, cpu=9.0, load=14.0, cores=2))
    said = own.ran_out(busy, 20.0)
    assert said.startswith("not decided: the machine is busy: load 14 on 2 cores; your function had 9 s of its own")
    assert "endless loop" not in said and "--max-seconds 60" in said
    line = own.timing_line({"cases": [{"error": said, "busy": True}, {"skipped": "not run"}]})
    assert line.key == "busy" and line.text.startswith("the machine is busy")
    hang = remote.Lost("no answer", True, pace.Spent(20.0, wall=21.0, cpu=20.5, load=14.0, cores=2))
    said = own.ran_out(hang, 20.0)
    assert "endless loop" in said and "used its whole budget" in said
    assert own.timing_line({"cases": [{"error": said, "busy": False}]}).key == "hangs"
    assert own.timing_line({"cases": [{"error": "ValueError: mine"}]}) is None


def test_a_level_s_own_cases_say_how_their_budget_was_set_where_the_machine_held_them_back():
    """Levels 3, 5 and 6 asked their cases with a budget and no word of how it was set: the busy line said "of a
    budget of 20 s" and nothing else. Each request now carries its basis, and the line says it."""
    from attnlab.lab.levels import own

    asked = []

    def run(header, seconds, basis):
        asked.append((header["what"], seconds, basis))
        if header.get("case") == 1:  # held back past the ceiling, twice: the Lost the remote side raises
            raise remote.Lost("no answer", True, pace.Spent(seconds, wall=seconds * 12, cpu=9.0, load=14.0, cores=2,
                                                            basis=basis))
        return {"cases": [{}]}

    reply, lost = own.graded(run, ["a", "b", "c"], 0, "module", 20.0)
    assert asked == [("grade", 20.0, "--max-seconds 20 a case (20 s unless given)")] * 2 and lost
    said = reply["cases"][1]["error"]
    assert said.startswith("not decided: the machine is busy: load 14 on 2 cores") and reply["cases"][1]["busy"]
    assert "(a set budget, not a reference's time: --max-seconds 20 a case (20 s unless given))" in said, said
    assert reply["cases"][2] == {"skipped": "not run: the case 'b' before it ran out of time"}


@pytest.mark.slow
def test_an_interrupt_while_the_function_runs_ends_its_process_at_once(tmp_path):
    """A Ctrl-C (or an error) that reaches the judge while the function computes: the process is killed, not asked to
    close -- it would read that request only when the function returned, and the judge waited 5 s for a hang."""

    def interrupt_once_it_computes(fn):
        pid, end = fn.process.pid, time.monotonic() + 60
        cpu0 = pace.cpu_seconds(pid)
        while time.monotonic() < end and not (fn.asked and pace.cpu_seconds(pid) - cpu0 > 0.2):
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGALRM)  # the judge's Ctrl-C, while the function is in its call

    with _judged(tmp_path, 1e9) as fn:
        previous = signal.signal(signal.SIGALRM, signal.default_int_handler)
        try:
            threading.Thread(target=interrupt_once_it_computes, args=(fn,), daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                verify.verify({"mine": fn}, [CASE], timeout=60.0, backward=False)
        finally:
            signal.signal(signal.SIGALRM, previous)
        assert fn.asked and fn.process.poll() is None  # still in the call
        t0 = time.perf_counter()
        fn.close()
        took = time.perf_counter() - t0
    print(f"closed in {took:.2f} s: {fn.lost}")
    assert fn.process.poll() is not None and took < 2.0 and fn.lost == "closed"
