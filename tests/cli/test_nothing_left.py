"""Commands that start processes leave none running when they end: after Ctrl-C and after a full disk.

Each command runs as a newcomer runs it, a terminal's foreground job, with a tag in its environment that
every process it starts inherits (the ranks, the fork server, multiprocessing's resource tracker). Right
after the command has exited, no process with that tag may run -- counted at once, not after a grace
period: a process still ending then is one a user sees in ``ps``. A failed rank is covered where the
failures are tested (tests/cli/test_ring_cli.py, tests/cli/test_train_parallel_cli.py).
"""

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import full_device
from tests.processes import Lines, foreground, kill_group, left_by, marked_env, of_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the run's processes in /proc")]

TINY = ["train", "--preset", "tiny", "--scale", "sqrt"]
GUARD_S = 300  # a stop for a hang, not a speed


def _start(argv: list[str]):
    tag = uuid.uuid4().hex
    return foreground([sys.executable, "-m", "attnlab", *argv], env=marked_env(tag)), tag


def _ctrl_c(p) -> str:
    """What Ctrl-C does: every process of the foreground group gets SIGINT. Returns stderr once it has exited."""
    os.killpg(p.pid, signal.SIGINT)
    p.wait(timeout=GUARD_S)
    return p.stderr.read()


def test_ctrl_c_into_ring_stops_every_rank_says_one_line_and_leaves_nothing():
    # Interrupted once the ranks work -- the run says so -- rather than some seconds after the estimate: on a
    # busy machine the fork server may still be importing torch then, and no rank runs yet.
    p, tag = _start(["ring", "--world", "2", "--seq", "8192", "--causal", "--backward"])
    try:
        lines = Lines(p.stdout)
        lines.wait_for("estimated")
        working = lines.wait_for("layout: forward + backward")  # a rank computes: every rank has joined the group
        err = _ctrl_c(p)
        left = left_by(tag)
        print(working, repr(err), left)
        assert p.returncode == 130 and err == "attnlab ring: stopped (Ctrl-C); nothing was kept (--json is " \
                                              "written at the end): run it again\n"
        assert left == {}
    finally:
        kill_group(p.pid)


def test_ctrl_c_into_context_parallel_training_saves_stops_and_leaves_nothing(tmp_path):
    p, tag = _start([*TINY, "--context-parallel", "2", "--steps", "100000", "--eval-every", "100000",
                     "--out", str(tmp_path)])
    try:
        deadline = time.monotonic() + GUARD_S
        while not (tmp_path / "checkpoints" / "scale-sqrt.pt").is_file():  # step 0 is saved: the ranks train
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.1)
        err = _ctrl_c(p)
        out = p.stdout.read()
        left = left_by(tag)
        print(out[-500:], repr(err), left)
        assert p.returncode == 130 and "Traceback" not in out + err and "failed" not in out + err
        assert len(err.strip().splitlines()) == 1, err  # a first Ctrl-C is a request: saved, said where, once
        assert err.startswith("attnlab train: stopped (Ctrl-C) at step ") and "and --resume to train on" in err
        assert left == {}
    finally:
        kill_group(p.pid)


@pytest.mark.parametrize("argv, path", [
    (["ring", "--world", "2", "--seq", "256", "--no-measure", "--json", "{out}/ring.json"], "ring.json"),
    ([*TINY, "--procs", "2", "--steps", "2", "--eval-every", "2", "--out", "{out}"], "checkpoints/scale-sqrt.pt"),
], ids=["ring --json", "train --procs"])
def test_a_full_disk_is_one_line_exit_2_and_leaves_nothing(tmp_path, argv, path):
    out = tmp_path / "out"
    (out / path).parent.mkdir(parents=True)
    (out / f"{path}.tmp").symlink_to(full_device(tmp_path))  # every write of that file ends in ENOSPC
    p, tag = _start([a.format(out=out) for a in argv])
    try:
        stdout, err = p.communicate(timeout=GUARD_S)
        left = left_by(tag)
        print(stdout[-500:], repr(err), left)
        assert p.returncode == 2 and len(err.strip().splitlines()) == 1, err
        assert f"error: cannot write {out / path}: No space left on device" in err
        assert left == {}
    finally:
        kill_group(p.pid)


# the modules a judged function runs in: verify's, the lab's
WORKERS = ("attnlab.judge.apart.worker", "attnlab.lab.judged")
HANGS = "import time\n\n\ndef attention_by_hand(q, k, v, **kw):\n    time.sleep(600)\n"


@pytest.mark.parametrize("argv", [["verify", "--impl", "hangs:attention_by_hand", "--quick", "--timeout", "600"],
                                  ["lab", "check", "hangs.py"]], ids=["verify --impl", "lab check"])
def test_ctrl_c_into_a_judged_function_ends_its_process_too(tmp_path, monkeypatch, argv):
    """The judged function's process ignores Ctrl-C (the judge's to handle): the judge ends it, says one line, 130."""
    (tmp_path / "hangs.py").write_text(HANGS)
    monkeypatch.chdir(tmp_path)
    p, tag = _start(argv)
    try:
        deadline = time.monotonic() + GUARD_S
        while not any(worker in cmd for worker in WORKERS for cmd in
                      (Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") for pid in of_run(tag)
                       if Path(f"/proc/{pid}/cmdline").exists())):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.1)
        time.sleep(1.0)  # the function is called (it hangs in it)
        err = _ctrl_c(p)
        left = left_by(tag)
        print(repr(err), left)
        assert p.returncode == 130 and len(err.strip().splitlines()) == 1, err
        assert err.startswith(f"attnlab {argv[0]}: stopped (Ctrl-C); ") and err.strip().endswith("run it again")
        assert left == {}
    finally:
        kill_group(p.pid)
