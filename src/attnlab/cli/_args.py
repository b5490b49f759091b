"""The argparse types and argument checks several commands share: a seed, a number of seconds, a positive
integer, and a form that runs in one process."""

from __future__ import annotations

import argparse
import math

SEED_MAX = 2**32 - 1  # torch takes up to 2**64 - 1, but experiments derive seeds from seed + n


def seed(text: str) -> int:
    """argparse type: a seed from 0 to 2**32 - 1 (torch fails on larger ones with an overflow deep inside)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= n <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to {SEED_MAX}, got {n}")
    return n


def seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds (--timeout and the like)."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}: give a positive, "
                                         "finite number of seconds")
    return x


def positive(text: str) -> int:
    """argparse type: an integer of at least 1 (--steps, --tokens and the like)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def single_process_form(name: str, what: str, device: str | None = None):
    """The registered form ``name`` for ``--impl``, or a UsageError (unknown, needs a process group, or
    cannot run on ``device``)."""
    from attnlab import kernels

    from . import UsageError

    try:
        form = kernels.get(name)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if form.distributed:
        raise UsageError(f"--impl {name} runs across the ranks of a torch.distributed group; {what} "
                         f"runs in one process: choose one of {', '.join(kernels.forms())}")
    why = form.why_not(device) if device in ("cpu", "cuda") else None
    if why is not None:
        raise UsageError(f"--impl {name} cannot run on {device} here: {why}")
    return form
