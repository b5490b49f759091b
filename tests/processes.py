"""Child processes as a terminal runs them, and the conditions the tests wait for instead of sleeping.

A busy machine makes every phase of a run slower by an unknown factor, so a test that sleeps and then acts
lands in a phase it did not mean. These helpers wait for what the run says (a line of its output) or for
what the system shows (a process gone), each with a generous guard that stops a hang, never a claim about
how long anything takes.
"""

import os
import queue
import signal
import subprocess
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

GUARD_S = 300.0  # a run that says nothing for this long hangs: a stop for the test, not a speed


@contextmanager
def sigint_as_at_a_terminal():
    """SIGINT handled as in a shell at a terminal, in this process and the children it starts meanwhile.

    A job started with '&' from a script (a suite run in the background, some CI runners) inherits SIGINT
    ignored, and Python keeps it ignored, as it should: Ctrl-C at the terminal is not meant for it. A child
    started from such a pytest would never see the Ctrl-C a test sends.
    """
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def foreground(cmd: list[str], **kw) -> subprocess.Popen:
    """Start ``cmd`` as a terminal's foreground job: its own process group, SIGINT at its default, output piped."""
    with sigint_as_at_a_terminal():
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, **kw)


MARK = "ATTNLAB_TEST_RUN"  # an environment variable every process of one run inherits


def marked_env(tag: str) -> dict:
    """This environment with ``tag`` added: every process a run started with it starts inherits the tag."""
    return {**os.environ, MARK: tag}


def of_run(tag: str) -> list[int]:
    """The processes still running that carry ``tag`` in their environment (:func:`marked_env`).

    Every process the run started, however started: a rank forked by a fork server, a helper that left the
    process group or lost its parent -- what a count of the group or of the children would miss.
    """
    needle = f"{MARK}={tag}".encode() + b"\0"
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (p / "environ").read_bytes() + b"\0" and alive(int(p.name)):
                found.append(int(p.name))
        except OSError:
            pass
    return found


def left_by(tag: str) -> dict[int, str]:
    """What a run marked ``tag`` left running, each with its command line; SIGKILLed, so a failing test cleans up."""
    left = {p: _cmdline(p) for p in of_run(tag)}
    for p in left:
        with suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return left


class Lines:
    """A child's output read line by line in a thread, so that a test can wait for a line without hanging."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, text: str, guard_s: float = GUARD_S) -> str:
        """The next line that contains ``text``; AssertionError when the output ends first, or nothing comes."""
        while True:
            try:
                line = self._q.get(timeout=guard_s)
            except queue.Empty:
                raise AssertionError(f"no output for {guard_s:g} s while waiting for {text!r}: "
                                     f"{self.seen[-5:]}") from None
            if line is None:
                raise AssertionError(f"the output ended without a line with {text!r}: {self.seen[-5:]}")
            self.seen.append(line)
            if text in line:
                return line


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def group_alive(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` that still run."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if int((p / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid and alive(int(p.name)):
                    found.append(int(p.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


def wait_until_gone(pids, guard_s: float = 60.0) -> None:
    """Return once none of ``pids`` (a list, or a function giving one) runs; AssertionError naming the ones
    left, with their command lines, if some still run after ``guard_s``."""
    deadline = time.monotonic() + guard_s
    while True:
        left = [p for p in (pids() if callable(pids) else pids) if alive(p)]
        if not left:
            return
        if time.monotonic() > deadline:
            names = {p: _cmdline(p) for p in left}
            raise AssertionError(f"still running {guard_s:g} s later: {names}")
        time.sleep(0.1)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
    except OSError:
        return "?"


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group (a test's clean-up)."""
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def sleeps(rank, world):
    """A rank that never returns (an hour asleep): for the tests of what stops one."""
    time.sleep(3600)
