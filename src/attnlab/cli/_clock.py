"""How long the learner waited for a command: what ``attnlab lab check`` keeps as "the check took".

When the command is the process (the ``attnlab`` script, ``python -m attnlab``), the wait began when the
process did: the interpreter's start and the imports (torch's takes seconds) are part of it, so it is
counted from the process's start time in ``/proc``. A command called in a process that was already
running (a test calling :func:`attnlab.cli.main` with its arguments) is counted from that call.
Nothing here imports torch: it is read before anything heavy is.

A command whose time is kept (``lab check``) ends its process as soon as it is done (:func:`end`): the
interpreter's teardown with torch loaded -- every module cleared, every object freed -- took 3 s after
the check had said what it took at load 10, and a minute beside 8 busy processes, so the wait kept
would be a part of the wait again. Its files are written and closed, its output flushed, its learner's
process ended before it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

_begun = time.monotonic()  # when the command began, on the monotonic clock
_before = 0.0  # the process's seconds before that, where the command is the whole process


def process_age(pid: int | str = "self") -> float | None:
    """Seconds since process ``pid`` started (its start time after boot against the time since boot, from
    ``/proc``); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        start = int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return up - start if up >= start else None


def begin(whole_process: bool) -> None:
    """The command begins now; ``whole_process``: it is the process's own (then its start counts too)."""
    global _begun, _before
    _begun = time.monotonic()
    _before = (process_age() or 0.0) if whole_process else 0.0


def waited() -> float:
    """Seconds the learner has waited for this command so far."""
    return _before + time.monotonic() - _begun


AT_ONCE = ("lab",)  # the commands that end their process as soon as they are done (their time is kept)


def ends_at_once(command: list[str]) -> bool:
    """Does the command (its first argument) end its process at once when it is done?"""
    return bool(command) and command[0] in AT_ONCE


def end(code: int) -> None:
    """End this process now with ``code``, its output flushed, without the interpreter's teardown."""
    for f in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: nothing more can be said there
            f.flush()
    os._exit(code)
