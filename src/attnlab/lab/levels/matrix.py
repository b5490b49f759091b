"""Level 2, the matrix form: ``attention_matrix(q, k, v)`` in four tensor lines; its memory grows like T².

Graded as level 1 is, with the same slips (a matrix form slips the same ways, and some of its own:
``k.T`` on a batched k, the scores transposed, the max taken down the columns), and measured at
T = 128, 512, 2048: the whole (T, T) matrix of scores is held at once, so the extra memory must grow
as the level asks (:attr:`attnlab.lab.levels.Level.growth`: T^p with p within 0.25 of 2).
"""

from __future__ import annotations

from attnlab.lab import measure

from . import forwards, slips

SEQS = measure.SEQS
PROBES = slips.PROBES
MORE_CASES = (slips.LARGE, slips.WIDE_V)  # graded beside the grid's


def slip_list():
    return slips.common(always_causal=True)


def slip_pairs():
    return slips.common_pairs(always_causal=True)


def wrap(fn):
    return fn


def probe_call(fn, q, k, v, case):
    return fn(q, k, v)


def measured_ok(result) -> tuple[bool, str]:
    from . import BY_NAME

    return forwards.memory_ok(result, BY_NAME["matrix"].growth)
