"""Checks for the plain arguments of attnlab's functions and configs: whole numbers and real numbers.

Each check returns the value when it is good and otherwise raises a ``ValueError`` that names the
argument and shows what it got, in one of two voices::

    positive_int("world", 0)                          # world must be a positive integer, got 0
    positive_int("window", 0, owner="sliding_window") # sliding_window needs a positive integer window, got 0

A bool is never a number here: ``True`` would otherwise pass as 1. The tensors of an attention
call are checked in :mod:`attnlab.kernels._check`; this module holds the checks every floor shares.
"""

from __future__ import annotations

import inspect
import math
import numbers


def is_int(value) -> bool:
    """True for a Python int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value) -> bool:
    """True for a real number (int, float, numpy scalar ...) that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def fail(name: str, value, what: str, owner: str | None = None) -> ValueError:
    """The error: '<name> must be <what>, got <value>', or '<owner> needs <what> <name>, got <value>'."""
    if owner is None:
        return ValueError(f"{name} must be {what}, got {value!r}")
    return ValueError(f"{owner} needs {what} {name}, got {value!r}")


def int_at_least(name: str, value, low: int, what: str | None = None, owner: str | None = None) -> int:
    """``value`` when it is an int >= ``low``; ``what`` describes it in the error (default from ``low``)."""
    if not is_int(value) or value < low:
        if what is None:
            what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
        raise fail(name, value, what, owner)
    return value


def positive_int(name: str, value, what: str = "a positive integer", owner: str | None = None) -> int:
    """``value`` when it is an int >= 1."""
    return int_at_least(name, value, 1, what, owner)


def nonneg_int(name: str, value, what: str = "a non-negative integer", owner: str | None = None) -> int:
    """``value`` when it is an int >= 0."""
    return int_at_least(name, value, 0, what, owner)


def positive_real(name: str, value, what: str = "a positive, finite number", owner: str | None = None) -> float:
    """``value`` as a float when it is a real number with 0 < value < inf."""
    if not is_real(value) or not (0 < value < math.inf):
        raise fail(name, value, what, owner)
    return float(value)


SECONDS_MAX = 86400.0  # a day: the most any limit in seconds may be (a timeout, a budget, --max-seconds). Waits are
# made of such limits times a case's size and a number of cases, and 1e12 s overflowed the operating system's wait
SECONDS = f"a positive number of seconds, at most {SECONDS_MAX:.0f} (a day)"


def seconds(name: str, value, owner: str | None = None) -> float:
    """``value`` as a float when it is a real number with 0 < value <= :data:`SECONDS_MAX`."""
    if not is_real(value) or not (0 < value <= SECONDS_MAX):
        raise fail(name, value, SECONDS, owner)
    return float(value)


def real_in_range(name: str, value, low: float, high: float, *, high_open: bool = False,
                  what: str | None = None) -> float:
    """``value`` as a float when low <= value <= high (< high with ``high_open``)."""
    inside = is_real(value) and low <= value and (value < high if high_open else value <= high)
    if not inside:
        raise fail(name, value, what or f"a number in [{low:g}, {high:g}{')' if high_open else ']'}")
    return float(value)


def takes(fn, n: int, what: str, signature: str) -> None:
    """TypeError naming ``what`` and the ``signature`` it must have when ``fn`` cannot be called with ``n``
    positional arguments (checked once, when it is given, not deep inside a kernel)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: it will say so itself when called
        return
    try:
        sig.bind(*range(n))
    except TypeError:
        raise TypeError(f"{what} must take {n} arguments {signature}; it takes {sig}") from None
