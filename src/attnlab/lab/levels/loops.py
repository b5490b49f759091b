"""Level 1, loops: ``attention_by_hand(q, k, v)``, one query and one key at a time (the lab's first starter).

Graded on verify's grid as a (q, k, v) function that is always causal (:mod:`attnlab.lab.grade`),
its slips named from its outputs on the probes (:mod:`.slips`), its time and memory measured at
T = 128, 512, 2048.
"""

from __future__ import annotations

from attnlab.lab import measure

from . import slips

SEQS = measure.SEQS
PROBES = slips.PROBES
MORE_CASES = (slips.LARGE, slips.WIDE_V)  # graded beside the grid's


def slip_list():
    return slips.common(always_causal=True)


def slip_pairs():
    return slips.common_pairs(always_causal=True)


def wrap(fn):
    """The learner's function as the grid calls it: (q, k, v)."""
    return fn


def probe_call(fn, q, k, v, case):
    """The learner's output on a probe (always causal, as the level's function is)."""
    return fn(q, k, v)


def measured_ok(result) -> tuple[bool, str]:
    """What the level asks of its measurement: none beyond having measured it (the loops keep a row at a time)."""
    done = [t.seq for t in result.timings if t.peak_bytes is not None]
    return bool(done), (f"time and peak memory at T = {', '.join(map(str, done))}" if done else "not measured")
