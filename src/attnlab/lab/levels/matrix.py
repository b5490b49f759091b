"""Level 2, the matrix form: ``attention_matrix(q, k, v)`` in four tensor lines; its memory grows like T².

Graded as level 1 is, with the same slips (a matrix form slips the same ways: √S for √d, the softmax
over dim=-2, the mask turned round), and measured at T = 128, 512, 2048: the whole (T, T) matrix of
scores is held at once, so the extra memory must grow as T^p with p within 0.25 of 2.
"""

from __future__ import annotations

from attnlab.lab import measure

from . import slips

SEQS = measure.SEQS
QUADRATIC = 0.25  # memory growth within this of T² counts as quadratic


def slip_list():
    return slips.common()


def wrap(fn):
    return fn


def measured_ok(result) -> tuple[bool, str]:
    p = result.exponents.get("memory")
    if p is None:
        return False, "its memory was not measured at two lengths or more"
    ok = abs(p - 2) <= QUADRATIC
    return ok, f"memory grew as T^{p:.2f} (the level asks for T², within {QUADRATIC})"
