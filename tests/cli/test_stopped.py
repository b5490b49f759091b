"""Ctrl-C anywhere is the learner's stop: one line on stderr, `attnlab COMMAND: stopped (Ctrl-C)` with what was
kept and how to go on, exit 130 -- never "failed", never a traceback, also when a process the command started is
what Ctrl-C ended."""

import os
import signal
import sys
import time

import pytest

from attnlab.cli import STOPPED, Stopped, main
from tests.processes import Lines, foreground, kill_group

GUARD_S = 300  # a stop for a hang, not a speed


def _raises(e):
    def run(args):
        raise e
    return run


def test_a_keyboard_interrupt_in_any_command_is_one_stopped_line_and_130(monkeypatch, capsys):
    """It was `attnlab demo: interrupted`: neither what was kept nor how to go on."""
    import attnlab.cli.demo

    monkeypatch.setattr(attnlab.cli.demo, "run", _raises(KeyboardInterrupt()))
    assert main(["demo"]) == STOPPED == 130
    got = capsys.readouterr()
    assert got.err == ("attnlab demo: stopped (Ctrl-C); nothing was kept (the figures and demo.json are written at "
                       "the end): run it again\n")
    assert "failed" not in got.out + got.err and "Traceback" not in got.out + got.err


def test_a_command_that_kept_something_says_where_it_stopped_and_how_to_go_on(monkeypatch, capsys):
    import attnlab.cli.bench

    monkeypatch.setattr(attnlab.cli.bench, "run", _raises(Stopped("the cases done are kept: run it again",
                                                                  "after 3 s")))
    assert main(["bench"]) == 130
    said = capsys.readouterr().err
    assert said == "attnlab bench: stopped (Ctrl-C) after 3 s; the cases done are kept: run it again\n"


def test_a_training_stopped_before_any_checkpoint_says_to_start_again_and_after_one_to_resume(tmp_path, monkeypatch,
                                                                                             capsys):
    import attnlab.cli.train
    from attnlab.train import checkpoint

    monkeypatch.setattr(attnlab.cli.train, "run", _raises(KeyboardInterrupt()))
    argv = ["train", "--scale", "sqrt", "--out", str(tmp_path)]
    assert main(argv) == 130
    assert capsys.readouterr().err == ("attnlab train: stopped (Ctrl-C); no checkpoint was written yet: run it again "
                                       "to train from the start\n")
    checkpoint.path_of(tmp_path, "scale", "sqrt").parent.mkdir()
    checkpoint.path_of(tmp_path, "scale", "sqrt").write_bytes(b"")
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"attnlab train: stopped (Ctrl-C); the checkpoints are kept in "
                                       f"{tmp_path / 'checkpoints'}: run it again with the same flags and --resume "
                                       "to train on from them\n")


def test_a_command_run_inside_another_leaves_the_line_to_it(monkeypatch, capsys):
    """lesson --build runs its steps as commands in its process: one line, the build's, not one a level."""
    import attnlab.cli.demo

    monkeypatch.setattr(attnlab.cli.demo, "run", _raises(KeyboardInterrupt()))
    import attnlab.cli.tune

    def outer(args):
        assert main(["demo"]) == 130  # said nothing
        raise Stopped("the outer's way on", "in step 1 of 1, demo")

    monkeypatch.setattr(attnlab.cli.tune, "run", outer)
    assert main(["tune"]) == 130
    assert capsys.readouterr().err == "attnlab tune: stopped (Ctrl-C) in step 1 of 1, demo; the outer's way on\n"


@pytest.mark.parametrize("exitcode, raised, stopped", [(-signal.SIGINT, None, True), (130, None, True),
                                                         (1, "KeyboardInterrupt", True), (1, "ValueError", False),
                                                         (-signal.SIGKILL, None, False)])
def test_a_rank_that_ctrl_c_ended_is_told_apart_from_a_failed_one(exitcode, raised, stopped):
    from attnlab.distributed import launch

    e = launch.LaunchError([launch.Outcome(0, exitcode, None, "why", 0.1, raised), launch.Outcome(1, 0, 7)])
    assert e.by_ctrl_c is stopped


@pytest.mark.slow(first="the training modules and the tiny corpus, which the worker keeps after")
def test_ranks_that_ctrl_c_ended_stop_the_training_they_do_not_fail_it(tmp_path, monkeypatch, capsys):
    """A rank ended by SIGINT was "training across 2 processes failed: rank 0 of 2: killed by SIGINT", exit 2."""
    import contextlib

    from attnlab.distributed import launch, servers

    monkeypatch.setattr(servers, "session", contextlib.nullcontext)
    monkeypatch.setattr(launch, "launch", lambda *a, **kw: [launch.Outcome(0, -signal.SIGINT, None, "killed by SIGINT"),
                                                            launch.Outcome(1, 0, 0)])
    assert main(["train", "--preset", "tiny", "--scale", "sqrt", "--procs", "2", "--out", str(tmp_path)]) == 130
    got = capsys.readouterr()
    assert got.err == ("attnlab train: stopped (Ctrl-C); no checkpoint was written yet: run it again to train from "
                       "the start\n")
    assert "failed" not in got.out + got.err


def _ctrl_c_when(argv: list[str], line: str, *, then=lambda: None) -> tuple[int, str, str]:
    """Run ``argv`` as a terminal's foreground job, send Ctrl-C (SIGINT to its whole group) once ``line`` was said
    and ``then()`` is true; (exit code, stdout, stderr)."""
    p = foreground([sys.executable, "-m", "attnlab", *argv])
    try:
        lines = Lines(p.stdout)
        lines.wait_for(line)
        deadline = time.monotonic() + GUARD_S
        while not then():
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.1)
        os.killpg(p.pid, signal.SIGINT)
        p.wait(timeout=GUARD_S)
        err = p.stderr.read()
        time.sleep(0.2)  # the reader thread takes the rest of stdout
        return p.returncode, "".join(lines.seen), err
    finally:
        kill_group(p.pid)


@pytest.mark.slow
def test_ctrl_c_into_a_running_bench_is_stopped_with_what_was_kept(tmp_path):
    # the loops form at T=256 takes seconds a call: the sweep runs when Ctrl-C comes
    code, out, err = _ctrl_c_when(["bench", "--impl", "loops", "--seq", "256", "512", "--repeats", "1",
                                   "--budget", "3600", "--matmul-size", "64", "--out", str(tmp_path)],
                                  "measuring this machine's matmul peak", then=lambda: time.sleep(1.0) or True)
    print(out[-800:], repr(err))
    assert code == 130 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("attnlab bench: stopped (Ctrl-C)") and "run it again" in err
    assert "Traceback" not in out + err and "failed" not in out + err and "interrupted" not in out + err


@pytest.mark.slow
def test_ctrl_c_into_a_training_says_the_step_it_saved_and_to_go_on_with_resume(tmp_path):
    ckpt = tmp_path / "checkpoints" / "scale-sqrt.pt"
    code, out, err = _ctrl_c_when(["train", "--preset", "tiny", "--scale", "sqrt", "--steps", "100000",
                                   "--eval-every", "100000", "--out", str(tmp_path)], "",
                                  then=ckpt.is_file)  # step 0 is saved: it trains
    print(out[-800:], repr(err))
    assert code == 130 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("attnlab train: stopped (Ctrl-C) at step ") and " of sqrt; the checkpoints are kept in " \
        f"{tmp_path / 'checkpoints'}: run it again with the same flags and --resume to train on from them" in err
    assert "Traceback" not in out + err and "failed" not in out + err


STARTING = "attnlab: stopped (Ctrl-C) while starting: nothing was done; run the command again\n"


def _as_a_terminal_starts_it():
    """A child with Ctrl-C's default disposition, as a shell starts a command (a worker of the suite may have had
    SIGINT ignored by what another test ran in it, and a child inherits that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_ctrl_c_while_the_command_starts_is_one_line_and_130_not_a_traceback():
    """torch loads for a second or more before the command's own handler runs; a Ctrl-C there printed Python's
    KeyboardInterrupt traceback. Here the process is the console script (argv[0] 'attnlab') and the Ctrl-C comes
    while the package is still being imported."""
    import subprocess

    code = ("import os, signal, sys, time; sys.argv[0] = '/usr/bin/attnlab'\n"
            "from attnlab import _starting\n"  # (the package's import set the guard: argv[0] is the command's)
            "assert signal.getsignal(signal.SIGINT) is _starting._stopped\n"
            "os.kill(os.getpid(), signal.SIGINT); time.sleep(30); print('not stopped')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_as_a_terminal_starts_it)
    assert r.returncode == 130 and r.stderr == STARTING and "not stopped" not in r.stdout, (r.returncode, r.stderr)


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_a_program_that_imports_attnlab_keeps_its_own_ctrl_c():
    """Only the command guards its start: a learner's script that imports the package gets KeyboardInterrupt."""
    import subprocess

    code = ("import os, signal, time\nimport attnlab\nfrom attnlab import _starting\n"
            "assert not _starting.is_command() and signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT); time.sleep(30)\nexcept KeyboardInterrupt:\n"
            "    print('mine')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       preexec_fn=_as_a_terminal_starts_it)
    assert r.returncode == 0 and r.stdout == "mine\n", r.stderr


@pytest.mark.slow
def test_ctrl_c_the_moment_the_command_starts_is_stopped_whichever_side_of_the_start_it_lands(tmp_path):
    """A real `python -m attnlab bench` given Ctrl-C 0.3 s in (while torch loads): one stopped line, exit 130."""
    import subprocess

    p = subprocess.Popen([sys.executable, "-m", "attnlab", "bench", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_as_a_terminal_starts_it)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=GUARD_S)
    assert p.returncode == 130 and "Traceback" not in err and "stopped (Ctrl-C)" in err, (p.returncode, err)
    assert err.count("\n") == 1, err
