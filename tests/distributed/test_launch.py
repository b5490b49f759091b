"""The launcher and Ctrl-C in each phase: the fork server starting, a rank starting, the launcher gone.

Each phase is reached by making it happen (a Ctrl-C raised inside the start, a launcher killed once its
ranks have said their pids), never by sleeping until it probably has; a wait is a guard against a hang.
"""

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from attnlab.distributed import launch, servers
from tests.processes import alive, sigint_as_at_a_terminal, sleeps, wait_until_gone

pytestmark = pytest.mark.skipif("forkserver" not in mp.get_all_start_methods() or not Path("/proc/self").exists(),
                                reason="the fork server and /proc (Linux)")


def test_a_ctrl_c_while_the_fork_server_starts_is_raised_not_dropped(monkeypatch):
    from multiprocessing import forkserver

    seen = {}

    def start_with_a_ctrl_c():  # stands in for forkserver.ensure_running: Ctrl-C lands while the server starts
        seen["held"] = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the server inherits it
        # to this thread, where it waits while blocked (a process-wide kill can land on another thread, e.g. xdist's)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    monkeypatch.setattr(forkserver, "ensure_running", start_with_a_ctrl_c)
    with sigint_as_at_a_terminal(), pytest.raises(KeyboardInterrupt):
        servers.start_server_deaf()
    assert seen["held"]  # the server starts deaf to Ctrl-C ...
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # ... and this process hears it again


def _rank(rank, world):
    return rank


@pytest.mark.slow
def test_a_ctrl_c_while_a_rank_starts_stops_the_started_ones_and_the_fork_server(monkeypatch):
    from multiprocessing import forkserver

    cls = mp.get_context("forkserver").Process
    real = cls.start
    started = {}

    def start(self):
        if started:
            raise KeyboardInterrupt  # Ctrl-C while the second rank starts
        real(self)
        started.update(rank=self.pid, server=forkserver._forkserver._forkserver_pid)

    monkeypatch.setattr(cls, "start", start)
    with pytest.raises(KeyboardInterrupt):
        launch.launch(sleeps, 2, timeout_s=3600)
    print(started)
    assert not alive(started["rank"])  # stopped and reaped before the KeyboardInterrupt went on
    assert not alive(started["server"])  # not left to finish importing torch (or to serve a dropped request)
    monkeypatch.undo()
    assert launch.results(launch.launch(_rank, 2)) == [0, 1]  # the next launch starts a server of its own


LAUNCHER = """
    import os, sys, time
    from pathlib import Path
    from attnlab.distributed import launch

    def says_its_pid_then_sleeps(rank, world, folder):
        Path(folder, f"rank{rank}.pid").write_text(str(os.getpid()))
        time.sleep(3600)

    if __name__ == "__main__":
        launch.launch(says_its_pid_then_sleeps, 2, (sys.argv[1],), timeout_s=3600)
"""


@pytest.mark.slow
def test_ranks_end_when_their_launcher_is_killed(tmp_path):
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent(LAUNCHER))
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path)], env={**os.environ, "TMPDIR": str(tmp_path)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pids = []
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a speed
        while len(pids) < 2:
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            pids = [int(f.read_text()) for f in tmp_path.glob("rank*.pid") if f.read_text()]
            time.sleep(0.1)
        p.kill()  # SIGKILL: the launcher cannot stop its ranks itself
        p.wait()
        wait_until_gone(pids)  # they were to sleep an hour
    finally:
        if p.poll() is None:
            p.kill()
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_rank_that_lost_its_peer_is_never_the_first_reason_even_when_it_was_seen_first():
    """Rank 0 saw rank 1 go (a broken transfer) and exited within the same poll as rank 1's SIGKILL, or before it:
    the reason said is rank 1's own."""
    from attnlab.distributed.launch import LOST_PEER, LaunchError, Outcome

    lost = Outcome(0, 1, None, f"UsageError: rank 0 of 2 {LOST_PEER} (it died): Connection closed by peer", 1.0)
    for killed_at in (1.0, 1.5):
        e = LaunchError([lost, Outcome(1, -9, None, "killed by SIGKILL", killed_at)])
        print(e)
        assert str(e).startswith("rank 1 of 2: killed by SIGKILL (then 1 other rank failed")
    # with no rank of its own reason, the peer's line is still said
    assert str(LaunchError([lost, Outcome(1, 0)])).startswith(f"rank 0 of 2: UsageError: rank 0 of 2 {LOST_PEER}")
