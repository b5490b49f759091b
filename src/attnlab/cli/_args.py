"""The argparse types and argument checks several commands share: a seed, a number of seconds, a positive
integer, a form that runs in one process, and ``--impl``: a registered form or your ``package.module:function``."""

from __future__ import annotations

import argparse
import math

from attnlab.judge.arguments import SEED_MAX  # the judge's rule: 0 to 2**32 - 1
from attnlab.kernels.argcheck import SECONDS, SECONDS_MAX  # a positive number of seconds, at most a day


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
    """argparse type: seconds above 0 and at most a day (--timeout, --max-seconds, --budget and the like).

    argparse names the option in its one line: ``argument --timeout: must be a positive number of seconds, at most
    86400 (a day), got '1e12'``."""
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and 0 < x <= SECONDS_MAX):
        raise argparse.ArgumentTypeError(f"must be {SECONDS}, got {text!r}")
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


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else the machine's count)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def threads(text: str) -> int:
    """argparse type: a thread count from 1 to this machine's cores. More threads than cores only wait on each
    other (1,024 on 2 cores ran for minutes at a load of 300), and torch crashes on counts in the tens of thousands."""
    n = positive(text)
    if n > cores():
        raise argparse.ArgumentTypeError(f"{n} threads on a machine with {cores()} cores: give 1 to {cores()}")
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


def function_spec(spec: str) -> str:
    """``spec`` when it reads ``package.module:function`` (no spaces, dotted names); else a UsageError naming it.

    Checked before anything runs: ``'pkg.mod: fn'`` would otherwise go to a child process, which looks for an
    attribute named ``' fn'``."""
    from . import UsageError

    module, _, attr = spec.partition(":")
    if any(ch.isspace() for ch in spec):
        raise UsageError(f"--impl {spec!r} has a space in it; write package.module:function without spaces, e.g. "
                         f"{''.join(spec.split())!r}")
    if not module or "" in module.split("."):  # a module file may be named my-mod.py; a function is a Python name
        raise UsageError(f"--impl {spec!r}: {module!r} is not a module name; give package.module:function")
    if not all(name.isidentifier() for name in attr.split(".")):
        raise UsageError(f"--impl {spec!r}: {attr!r} is not a function name; give package.module:function")
    return spec


def load_function(spec: str, device="cpu"):
    """``--impl`` -> (name, function): a registered form by its name, or ``package.module:function`` imported
    here (verify imports other people's functions in a child process instead: attnlab.judge.apart.isolate).
    Raises ``attnlab.judge.LoadError`` with a message for the user when it names nothing usable."""
    from attnlab import kernels
    from attnlab.judge import LoadError
    from attnlab.judge.apart.loader import import_function

    if ":" in spec:
        return spec, import_function(spec)
    try:
        form = kernels.get(spec)
    except ValueError as e:
        raise LoadError(f"{e}; or give your own function as package.module:function") from None
    if form.distributed:
        raise LoadError(f"form {spec!r} runs only across the ranks of a torch.distributed process group; "
                        f"check it with `attnlab ring`, which holds it to the same tolerance rule")
    why = form.why_not(device)
    if why is not None:
        raise LoadError(f"form {spec!r} cannot be checked on {device} here: {why}")
    return spec, form.fn
