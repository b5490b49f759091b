"""A time limit for one case of a function that is not attnlab's: a hang becomes a FAIL row, not a stuck run.

A hung Python call cannot be stopped from inside the process, so the case runs in a daemon thread
and the caller stops waiting after the limit; the thread is left behind (it does not keep the
process alive) and nothing more of that function is run. ``attnlab verify`` on the command line
runs other people's functions in a child process instead, which it can end outright
(:mod:`attnlab.judge.apart.isolate`); this watchdog serves the in-process API (``attnlab.testing``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

BASIC_WORK = 2 * 4 * 64 * 64  # N*H*L*S of the grid's basic case


def case_limit(case, timeout: float) -> float:
    """Seconds one case may take: ``timeout`` for the basic case's size (N*H*L*S = 32768), more in proportion."""
    return timeout * max(1.0, case.work / BASIC_WORK)


def watched(run: Callable, limit: float):
    """``run()`` in a daemon thread: its answer, or None when it has not returned after ``limit`` seconds."""
    box: dict = {}

    def work():
        try:
            box["value"] = run()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=work, name="attnlab-verify-case", daemon=True)
    t.start()
    t.join(min(limit, threading.TIMEOUT_MAX))  # a longer wait is an OverflowError
    if t.is_alive():
        return None
    if "error" in box:
        raise box["error"]
    return box["value"]
