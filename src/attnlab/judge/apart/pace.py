"""The judged function's own time: a budget that does not depend on how busy the machine is.

A deadline in wall seconds measures the machine as much as the function: beside eight busy processes
on two cores a correct function gets a fifth of a core, and a case it finishes in 2 s on an idle
machine takes 10 s of wall -- a verdict that flips with the load. So the judge counts what the
function's process itself was given: its CPU seconds (``/proc/PID/stat``; the judged process runs
torch on one thread, so its CPU time is never more than its wall time). A case runs out of time when
the function has had its whole budget of the CPU -- an endless loop does, at any load the machine
can bear -- or, for a function that waits (a sleep, a lock, reading stdin) and so uses almost no CPU,
when the wall time passes :data:`STRETCH` times the budget. A function that computes but is held
back -- another program's load, a container's CPU quota, a stopped process -- is waited for up to
:data:`STRETCH_MAX` times its budget, and only then said to have run out: because of the machine.
Where the CPU time cannot be read (no ``/proc``), the wall time divided by the slowdown the load
predicts stands for it.

:class:`Spent` says which it was: a function that used its budget (:attr:`Spent.used`), one that waited
(:attr:`Spent.waited`), or one the machine held back (:attr:`Spent.busy`) -- the only case the judge
says is the machine's.
"""

from __future__ import annotations

import os
import select
import time
from dataclasses import dataclass

STRETCH = 1.5  # a function that waits (no CPU) is ended after this many times its budget of wall time
STRETCH_MAX = 12.0  # one that computes, held back, after this many (a fifth of a core, beside 8 busy processes on 2
# cores, takes 5 times as long; a twelfth, a load of 23 on 2 cores)
WAITING = 0.02  # a process given less than this share of the wall time (and two clock ticks) waited, not computed
POLL_S = 0.2  # how often the CPU time is read while the judge waits


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def slowdown(load_avg: float | None, n: int) -> float:
    """How much slower than idle one more CPU-bound process runs at this 1-minute load on ``n`` cores (at least 1)."""
    if load_avg is None:
        return 1.0
    return max(1.0, (load_avg + 1.0) / max(n, 1))


def stretch(load_avg: float | None, n: int) -> float:
    """The wall ceiling as a multiple of the budget where the CPU time is not known: :data:`STRETCH` times the load's
    slowdown, at most :data:`STRETCH_MAX`."""
    return min(STRETCH_MAX, STRETCH * slowdown(load_avg, n))


def cpu_seconds(pid: int | None) -> float | None:
    """The user and system CPU seconds of process ``pid`` so far (all its threads); None where it cannot be read."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        fields = stat[stat.rindex(")") + 2:].split()  # after the command's name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Spent:
    """What one request of ``budget`` seconds cost: wall seconds, the process's CPU seconds (None: unreadable), and
    the machine's load at its busiest while it ran, on ``cores`` cores."""

    budget: float
    wall: float = 0.0
    cpu: float | None = None
    load: float | None = None
    cores: int = 1
    basis: str = ""  # how the budget was set ("10 s at the basic case's size, 4 times the work here"): said with it

    @property
    def own(self) -> float:
        """The function's own seconds: its CPU time (never more than the wall time), or the wall time over the
        slowdown the load predicts where the CPU time is not known."""
        if self.cpu is not None:
            return min(self.cpu, self.wall)
        return self.wall / slowdown(self.load, self.cores)

    @property
    def ceiling(self) -> float:
        """The most wall time it is waited for: long for a function that computes, short for one that waits."""
        if self.cpu is None:
            return self.budget * stretch(self.load, self.cores)
        return self.budget * (STRETCH if self.waited else STRETCH_MAX)

    @property
    def used(self) -> bool:
        """It had its whole budget of its own."""
        return self.own >= self.budget

    @property
    def waited(self) -> bool:
        """It used (almost) no CPU: a sleep, a lock, a read -- not work the load held back."""
        return self.cpu is not None and self.cpu < WAITING * self.wall + 0.02

    @property
    def busy(self) -> bool:
        """It ran out at the wall ceiling computing, given less than its budget of the CPU: the machine's time ran
        out (its load, a CPU quota), not the function's."""
        return not self.used and not self.waited and self.wall >= self.ceiling

    def words(self) -> str:
        """How it ran out, in words."""
        own = f"{self.own:.3g} s of its own" + ("" if self.cpu is not None else " (its wall time over the load)")
        if self.busy:
            load = "" if self.load is None else f": load {self.load:.3g} on {self.cores} core{'s' * (self.cores != 1)}"
            # No reference is timed beside it: the budget is a set number of the function's own CPU seconds, said
            # with how it was set; the load, its CPU seconds and the wait are what was measured
            basis = f": {self.basis}" if self.basis else ""
            return (f"the machine is busy{load}; your function had {own} in {self.wall:.3g} s of waiting, of a budget "
                    f"of {self.budget:.3g} s of its own CPU time (a set budget, not a reference's time{basis}), "
                    f"waited for up to {self.ceiling / self.budget:.3g} times that")
        if self.waited:
            return f"it waited: {self.wall:.3g} s with {own} of the CPU (a sleep, a lock, input?)"
        return f"it used its whole budget: {own} of the CPU, {self.budget:.3g} s allowed, in {self.wall:.3g} s"


def wait(fd: int, budget: float, pid: int | None) -> tuple[bool, Spent]:
    """Wait until ``fd`` is readable or the process ``pid`` has spent ``budget`` seconds of its own (or the wall
    ceiling passed): (whether it is readable, what was spent)."""
    spent = Spent(budget, cores=cores(), load=load())
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    while True:
        spent.wall = time.monotonic() - t0
        now = cpu_seconds(pid) if cpu0 is not None else None
        spent.cpu = None if now is None else now - cpu0
        if spent.used or spent.wall >= spent.ceiling:
            return bool(select.select([fd], [], [], 0)[0]), spent
        step = min(POLL_S, max(budget - spent.own, 0.0) + 0.01, spent.ceiling - spent.wall)
        if select.select([fd], [], [], max(step, 0.0))[0]:
            spent.wall = time.monotonic() - t0
            return True, spent
        now_load = load()
        if now_load is not None and (spent.load is None or now_load > spent.load):
            spent.load = now_load
