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
# Every case at most this many query-key pairs (batch, heads, head dims, alignment, dtype, layout kept: grade.within).
# Loops in Python cost about 0.13 ms a pair a case -- a forward and backward with autograd through every scalar step,
# and the forward again under no_grad and inference_mode -- so the grid at its own sizes (or cut to 2 s a case by
# the rate) took 85 of a check's 100 s, for nothing a loop does differently at T = 97 than at T = 27: each slip of
# the level (tests/lab/level_solutions.py) fails these cases as it failed the large ones, and every TODO of the
# starter left undone is named from them (tests/lab/test_exercise_grading.py grades at 300 pairs). The rate cuts
# a function slower still further, as before. The grid's longest case (L = 2049) was never run whole here: a loops
# version was cut to L of 150 or so by the rate, a size that depended on the machine's speed and load; now it is
# the same on every machine.
CASE_WORK = 1_500
CASE_WHY = ("loops in Python spend about a tenth of a millisecond on each query-key pair, and a case asks the same "
            "of them at a few dozen positions as at a hundred")


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
