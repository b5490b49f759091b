"""The judge's arguments, checked before any judge starts: one set of rules for ``attnlab verify`` and
:mod:`attnlab.testing`.

Each function takes the value as the user gave it and ``flag``: the command line's option name (``"--device"``), or
None for a keyword of :mod:`attnlab.testing` (the message then says ``device='cuda:7'``). Each returns the value in
the form the judge uses (a device as a string, dtypes as names) or raises ``TypeError`` / ``ValueError`` naming the
argument and what it accepts. A device that is not on this machine is :class:`NoDevice`, so that a GPU test can be
skipped on purpose (``pytest.mark.skipif(not torch.cuda.is_available(), ...)``) rather than fail by accident.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from attnlab.judge.cases import DTYPES
from attnlab.kernels.argcheck import SECONDS, SECONDS_MAX  # a positive number of seconds, at most a day

SEED_MAX = 2**32 - 1  # torch takes up to 2**64 - 1, but the judge and the experiments derive seeds from seed + n
TIMEOUT = 10.0  # seconds a case of someone else's function may take at the basic case's size (watchdog.case_limit)


class NoDevice(ValueError):
    """The device named is not on this machine (or holds no numbers): nothing can be judged there."""


def _said(name: str, value, flag: str | None) -> str:
    return f"{flag} {value}" if flag else f"{name}={value!r}"


def device(value, flag: str | None = None) -> str:
    """A torch device that is here and computes, as a string ('cpu', 'cuda:0').

    torch takes ``cpu:1`` (there is one CPU device) and makes tensors on ``meta`` (shapes without numbers), so both
    are refused by name; an index is checked against the devices of its kind that torch counts here."""
    import torch

    said = _said("device", value, flag)
    if isinstance(value, bool) or not isinstance(value, (str, torch.device)):
        raise TypeError(f"{said}: give a device as a string such as 'cpu' or 'cuda:0', or a torch.device")
    try:
        dev = torch.device(value)
    except (RuntimeError, ValueError) as e:
        said = f"{flag} {value!r}" if flag else said
        raise ValueError(f"{said} is not a torch device ({str(e).splitlines()[0]})") from None
    if dev.type == "meta":
        raise NoDevice(f"{said}: meta tensors hold shapes without numbers, so there is nothing to check on it; give "
                       "cpu or a GPU (cuda, cuda:0)")
    if dev.type == "cpu" and dev.index not in (None, 0):
        raise NoDevice(f"{said}: no such device here (torch has one CPU device, cpu; its threads are not devices)")
    count = getattr(getattr(torch, dev.type, None), "device_count", None)
    n = count() if callable(count) and dev.type != "cpu" else None
    if n and dev.index is not None and dev.index >= n:
        raise NoDevice(f"{said}: no such device here ({n} {dev.type} device{'s' if n > 1 else ''}: "
                       f"{dev.type}:0{f' to {dev.type}:{n - 1}' if n > 1 else ''})")
    try:
        torch.empty(1, device=dev)
    except (RuntimeError, AssertionError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NoDevice(f"{said}: no such device here ({first})") from None
    return str(dev)


def dtypes(value, flag: str | None = None) -> list[str]:
    """dtype names, each once, at least one: names or ``torch.dtype`` objects (on the command line, one string of
    names and commas)."""
    import torch

    choices = ", ".join(DTYPES)
    said = _said("dtypes", value, flag)
    if flag is not None and isinstance(value, str):
        items: list = [d.strip() for d in value.split(",") if d.strip()]
    elif isinstance(value, (str, torch.dtype)) or not isinstance(value, Iterable):
        raise TypeError(f"{said}: give a list of dtypes, e.g. ['float32', 'bfloat16'] (from {choices})")
    else:
        items = list(value)
    names = []
    for d in items:
        name = str(d).removeprefix("torch.") if isinstance(d, torch.dtype) else d
        if not isinstance(name, str) or name not in DTYPES:
            raise ValueError(f"{said}: {d!r} is not a dtype the judge checks; choose from {choices}")
        names.append(name)
    if not names:
        raise ValueError(f"{said} selects no dtype, so nothing would be judged; choose from {choices}")
    return list(dict.fromkeys(names))


def seed(value, flag: str | None = None) -> int:
    """A seed from 0 to 2**32 - 1 (torch fails on larger ones with an overflow deep inside)."""
    said = _said("seed", value, flag)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{said}: give an integer seed from 0 to {SEED_MAX}")
    if not 0 <= value <= SEED_MAX:
        raise ValueError(f"{said}: give a seed from 0 to {SEED_MAX}")
    return value


def timeout(value, flag: str | None = None) -> float:
    """Seconds a case may take at the basic case's size: above 0 and at most :data:`SECONDS_MAX`."""
    said = _said("timeout", value, flag)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{said}: give {SECONDS} (default {TIMEOUT:g})")
    if not (math.isfinite(value) and 0 < value <= SECONDS_MAX):
        raise ValueError(f"{said}: give {SECONDS} (default {TIMEOUT:g})")
    return float(value)


def factor(value, flag: str | None = None) -> float:
    """The rule's multiple of PyTorch's error: a finite number of at least 1 (never less than PyTorch's own)."""
    said = _said("factor", value, flag)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{said}: give a number >= 1 (default 2)")
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"{said}: give a number >= 1 (default 2): the rule never asks less of a kernel than "
                         "PyTorch's own error")
    return float(value)


def ratio(value, flag: str | None = None) -> float | None:
    """At most a function's error may be, as a multiple of PyTorch's own: None, or a finite number of at least 1."""
    if value is None:
        return None
    said = _said("max_ratio", value, flag)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{said}: give a number >= 1, or None")
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"{said}: give a number >= 1 (PyTorch's own error is 1x)")
    return float(value)


def only(value, flag: str | None = None) -> list[str] | None:
    """Words a case name must contain one of (None: every case)."""
    if value is None:
        return None
    said = _said("only", value, flag)
    if isinstance(value, str):
        words = [w.strip() for w in value.split(",")] if flag else [value]
    elif isinstance(value, Iterable):
        words = list(value)
    else:
        raise TypeError(f"{said}: give a word or a list of words that case names contain, e.g. ['causal', 'GQA']")
    if not words or not all(isinstance(w, str) and w.strip() for w in words):
        raise ValueError(f"{said}: give one or more non-empty words that case names contain, e.g. ['causal', 'GQA']")
    return words


def picked(cases: list, words: list[str] | None, given=None, flag: str | None = None) -> list:
    """The cases whose name contains one of ``words`` (case-insensitive); none picked is a ValueError naming a few.
    ``given``: ``only`` as the user wrote it (for the message)."""
    if words is None:
        return cases
    out = [c for c in cases if any(w.lower() in c.name.lower() for w in words)]
    if not out:
        names = sorted({c.name for c in cases})
        raise ValueError(f"{_said('only', words if given is None else given, flag)} matches no case, so nothing "
                         f"would be judged; case names are e.g. {', '.join(names[:8])}")
    return out
