"""Ctrl-C as a request, not a crash.

A KeyboardInterrupt can land anywhere -- halfway through ``optimizer.step()``, with half the
weights updated. Inside :func:`catch_interrupt` the first Ctrl-C only sets a flag; the training
loop looks at it between steps, writes a checkpoint of a consistent state, and stops. A second
Ctrl-C interrupts at once, as usual.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class StopFlag:
    def __init__(self) -> None:
        self.requested = False


@contextmanager
def catch_interrupt():
    """Yield a :class:`StopFlag` that the first SIGINT sets (outside the main thread: never set)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        if flag.requested:  # the second Ctrl-C: stop now
            raise KeyboardInterrupt
        flag.requested = True

    signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)
