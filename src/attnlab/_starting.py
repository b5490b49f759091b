"""A Ctrl-C while the ``attnlab`` command starts: torch takes one to several seconds to import, before
:func:`attnlab.cli.main` runs and can say "stopped"; Python would print a KeyboardInterrupt traceback there (or, in a
module's import, leave it half done). :func:`guard` -- only when this process is the command, ``attnlab ...`` or
``python -m attnlab ...``, never for a program that imports the package -- ends such a start with the command line's
own words and exit 130, and :func:`release` hands Ctrl-C back to Python once the command runs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

SAID = "attnlab: stopped (Ctrl-C) while starting: nothing was done; run the command again\n"


def is_command() -> bool:
    """This process is the command line's ``attnlab`` (its console script or ``python -m attnlab``)."""
    argv = getattr(sys, "orig_argv", None) or []
    if "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "attnlab":
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "") == "attnlab"


def _stopped(signum, frame):  # noqa: ARG001 -- a signal handler's signature
    try:
        os.write(2, SAID.encode())
    finally:
        os._exit(130)


def guard() -> bool:
    """While the command starts, Ctrl-C ends it at once with one line and exit 130: True if it was set."""
    if not is_command() or threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return False  # someone chose how Ctrl-C is handled here (ignored in a child, say): leave it
    signal.signal(signal.SIGINT, _stopped)
    return True


def release() -> None:
    """Ctrl-C raises KeyboardInterrupt again, as the commands expect (they say "stopped" themselves)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _stopped:
        signal.signal(signal.SIGINT, signal.default_int_handler)
