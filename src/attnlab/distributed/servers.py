"""The processes behind the ranks: multiprocessing's fork server and resource tracker, started and ended here.

A launch (:mod:`attnlab.distributed.launch`) forks its ranks from a fork server, which imports torch
once, and multiprocessing starts a resource tracker beside it. Both outlive a launch on purpose -- the
next launch of the same command reuses the server and saves the import -- and both end by themselves
once this process has gone. "By themselves" takes a moment, and longer while the server still imports
torch: a process seen right after the command exited. So a command wraps its launches in
:func:`session`; leaving it, however it is left (a result, an error, Ctrl-C), ends every rank the
server still holds, then the server, then the tracker, and waits for each of them.

Ctrl-C sends SIGINT to every process of the terminal's foreground group. The server is started deaf
to it (:func:`start_server_deaf`), so that the launcher alone stops the ranks; the end of a session
holds a second Ctrl-C off until everything is gone, then raises it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

WAIT_S = 10.0  # how long a helper process may take to end once asked, before it is killed


def context(preload: list[str]):
    """The multiprocessing context ranks start from: ``forkserver`` (preloading ``preload``) where the
    platform has it, else ``spawn``."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(preload)  # used when the server starts (once per server)
        start_server_deaf()
        return ctx
    return mp.get_context("spawn")


def start_server_deaf() -> None:
    """Start the fork server (and multiprocessing's resource tracker) deaf to Ctrl-C, this process not.

    The server would die of a Ctrl-C with a traceback while it still imports torch. It is started with
    SIGINT blocked, as the standard library starts its resource tracker: it holds a Ctrl-C pending until
    its loop ignores SIGINT, and the ranks forked from it ignore it too, so the launcher alone stops the
    ranks. This thread holds a Ctrl-C off only while it starts the server and takes it right after:
    ignoring SIGINT here instead, even for those milliseconds, would drop it and the run go on.
    """
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()  # first, alone: it blocks and unblocks SIGINT itself while it starts
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    path = os.environ.get("PYTHONPATH")
    # The server imports its preloads (attnlab among them) before it hears this process's sys.path, which Python
    # 3.11's server then drops: it would find them where its environment points, possibly another copy of attnlab
    # than the one running here, and the ranks could not unpickle their target. It gets this sys.path instead.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
    try:
        forkserver.ensure_running()  # starts the server and returns; it does not wait for its imports
    finally:
        if path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = path
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stop_server() -> None:
    """End the fork server now, and first every process it forked that still runs (the next launch starts
    another server).

    A rank the launcher lost track of (a Ctrl-C cut its start short) is the server's child, not ours: it is
    found through /proc and killed. The server may still be importing torch -- seconds on a busy machine --
    and would finish that before it noticed that the launcher had gone. The standard library keeps no public
    handle on its server, hence the guarded private names.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None or not hasattr(server, "_stop"):
        return
    ranks = children(pid)
    for rank in ranks:
        _signal(rank, signal.SIGKILL)
    _wait_gone(ranks)  # the server reaps them while it runs
    _signal(pid, signal.SIGTERM)
    with suppress(OSError):  # it was gone already
        server._stop()  # closes its 'alive' pipe, reaps it, forgets it


def stop_tracker() -> None:
    """End multiprocessing's resource tracker and reap it: it ends once every holder of its pipe has closed
    it (this process, the server, the ranks); one that has not ended within WAIT_S is killed."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    pid, fd = getattr(tracker, "_pid", None), getattr(tracker, "_fd", None)
    if pid is None or fd is None:
        return
    with tracker._lock:
        tracker._fd = tracker._pid = None  # the next launch starts another
        os.close(fd)  # its end of file: the tracker cleans up and exits
    deadline = time.monotonic() + WAIT_S
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                _signal(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return
            time.sleep(0.01)
    except ChildProcessError:  # reaped already
        pass


@contextmanager
def session():
    """Launches inside share one fork server; after the block no process they started runs.

    Only the helpers this block started are ended: a tracker or server that ran before it (in a program
    that launched ranks earlier) is left to its owner.
    """
    from multiprocessing import forkserver, resource_tracker

    server_before = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    tracker_before = getattr(resource_tracker._resource_tracker, "_pid", None)
    try:
        yield
    finally:
        with _holding_ctrl_c():
            if server_before is None:
                stop_server()
            if tracker_before is None:
                stop_tracker()


@contextmanager
def _holding_ctrl_c():
    """A Ctrl-C during the block waits for its end, then is raised (in the main thread; elsewhere: as is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if heard and callable(previous):  # as it would have been heard (a KeyboardInterrupt, or a stop request)
        previous(signal.SIGINT, None)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (through /proc; none where the system has no /proc)."""
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(p.name))
        except (OSError, IndexError, ValueError):
            pass
    return found


def _signal(pid: int, sig: int) -> None:
    with suppress(OSError):  # gone already
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _wait_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
