"""Is a function's answer a reading's answer? One rule for every place the judge or the lab asks it.

A *reading* is a wrong semantics computed on the same inputs -- attention with the scale left out, a mask a key
too far, a tiled backward whose dq is assigned instead of summed -- and the function has it when, wherever the
reading's answer differs from the right one, the function gave the reading's answer. The judge's lines read its
failing cases row by row (:mod:`attnlab.judge.explain`); the lab reads a level's slips on its probes and on its
own cases with this module, so that a learner's slip and a kernel author's cause are told by the same rule, at
the same tolerance (:func:`attnlab.judge.rule.reading_tolerance`):

* a row the reading leaves NaN (a query that sees no key under it, an overflow) says nothing, unless the function
  is NaN on exactly those rows where the right answer is a number -- the reading's own arithmetic shown;
* a reading whose answer is the right one on a case says nothing of it; one that differs must be met there.

A reading is named when it is met on every case it says something of, and says something of one at least; a pair
of readings (two wrong steps at once, tried where no single one is met) on one at least by its numbers, not only by
the rows it leaves NaN (an overflow is one step's, and says nothing of the other).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from attnlab.judge import rule

YES, NO, NOTHING = "yes", "no", "nothing"
SHOWN = "shown"  # met by the rows it leaves NaN alone: elsewhere its numbers are the right answer's, within tolerance
PAST_THE_DTYPE = 1e30  # a reading's answer this large is past any dtype's range: the function's inf says nothing


def void_rows(t: torch.Tensor, quantity: str) -> torch.Tensor:
    """Where ``t`` is not finite: per row of a matrix quantity (any of its features), per entry of the lse."""
    bad = ~torch.isfinite(t)
    return bad if quantity == "lse" or t.dim() < 2 else bad.any(dim=-1)


def says(quantity: str, mine: torch.Tensor | None, alt: torch.Tensor, right: torch.Tensor, dtype) -> str:
    """:data:`YES` (``mine`` is the reading's answer ``alt``), :data:`SHOWN` (it is, by the rows the reading leaves NaN
    alone), :data:`NO`, or :data:`NOTHING` (the reading gives the right answer here, or no row of its own), for one
    quantity of one case."""
    if mine is None or mine.shape != alt.shape:
        return NO
    mine, alt, right = mine.double(), alt.double(), right.double()
    void = void_rows(alt, quantity)
    keep, bad = ~void, void_rows(mine, quantity)
    if not bool(keep.any()):
        return NOTHING
    if bool((bad & keep).any()):  # NaN where the reading's answer is a number
        return NOTHING if float(alt[keep].abs().max()) > PAST_THE_DTYPE else NO
    live = ~void_rows(right, quantity)
    shown = bool((void & live).any()) and bool(((void & live) == (bad & live)).all())
    tol = rule.reading_tolerance(dtype, alt[keep], right[keep])
    # (the right answer's own tolerance asks whether the reading *is* the right answer here: one blown up far past it,
    # whose tolerance grows with it, is not -- it says something, and the function must be it)
    if float((alt[keep] - right[keep]).abs().max()) <= 10 * min(tol, rule.reading_tolerance(dtype, right[keep],
                                                                                            right[keep])):
        return SHOWN if shown else NOTHING
    return YES if float((mine[keep] - alt[keep]).abs().max()) <= tol else NO


def fits(answers: Sequence[dict | None], got: Sequence[dict | None], right: Sequence[dict], dtypes,
         by_value: bool = False) -> bool:
    """Over several cases: the reading's ``answers`` (per case, {quantity: tensor}, None where it says nothing of the
    case) are the function's ``got`` on every case it says something of, and it says something of one --
    ``by_value``: one where it has rows of numbers, not only the rows its arithmetic leaves NaN."""
    met = 0
    for alt, mine, r, dtype in zip(answers, got, right, dtypes, strict=True):
        if alt is None or mine is None:
            continue
        said = [says(q, mine.get(q), a, r[q], dtype) for q, a in alt.items() if q in r]
        if NO in said:
            return False
        met += YES in said or (SHOWN in said and not by_value)
    return met > 0


Reading = Callable[[int], "dict | torch.Tensor | None"]  # case index -> the reading's answer there


def named(got: Sequence[dict | None], right: Sequence[dict], dtypes, readings: Sequence[tuple[str, Reading]],
          pairs: Sequence[tuple[tuple[str, ...], Reading]] = ()) -> list[str]:
    """The keys of the readings the function's answers are, in the order of ``readings``; where none is, what every
    pair of readings (two wrong steps at once, ``((key, key), reading)``) that is says (:func:`common`). ``got``: the
    function's answers per case ({quantity: tensor}, None where it gave none); ``right``: the right ones;
    ``dtypes``: each case's."""
    fitting = [(key, answers_of(reading, got)) for key, reading in readings]
    fitting = [(key, a) for key, a in fitting if fits(a, got, right, dtypes)]
    by_value = [key for key, a in fitting if fits(a, got, right, dtypes, by_value=True)]
    # (a reading met only by the rows it leaves NaN yields to one met by its numbers: a tile's exps divided by that
    # tile's own sum are NaN where a tile hides a row's every key, as an unguarded rescale is, and say more besides)
    found = by_value or [key for key, _ in fitting]
    if not found:
        found = common([keys for keys, reading in pairs
                        if fits(answers_of(reading, got), got, right, dtypes, by_value=True)])
    return list(dict.fromkeys(found))


def common(fitting: Sequence[Sequence[str]]) -> list[str]:
    """What the pairs of readings that fit say together: the keys every one of them has (in the first's order). Two
    wrong steps at once can meet the function's answers in more than one way -- weights divided by the sum over the
    whole tensor leave every answer near zero, and a second step beside that may fit within the tolerance -- and only
    what every way has is the function's; where they share nothing, no pair is named."""
    if not fitting:
        return []
    return [k for k in dict.fromkeys(fitting[0]) if all(k in f for f in fitting[1:])]


def answers_of(reading: Reading, got) -> list[dict | None]:
    out = []
    for i, mine in enumerate(got):
        a = reading(i) if mine is not None else None
        out.append({"out": a} if isinstance(a, torch.Tensor) else a)
    return out
