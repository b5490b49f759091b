"""Does a variant learn worse than its baseline? Read on every measurement of the run that bears on it.

One number can hide what another shows. A model with attention scaled by 1/d can end with the same
validation loss as one scaled by 1/√d and still grow no induction head, so that it cannot copy a
sequence it has just read. So a comparison of two trained variants is read on three measurements:

    final validation loss        worse when more than LOSS_GAP above the baseline's
    induction share (best head)  worse when below the induction rule while the baseline's head meets it
    loss on the repeated copy    worse when more than REPEAT_GAP above the baseline's

A :class:`Verdict` lists each reading with its numbers and rule. It holds when every reading shows
the variant worse, fails when none does, and is mixed -- said as such -- when they disagree. A
measurement the run did not take (a run without the heads measured) is named, not guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from attnlab.results import Result

from .summary import LOSS_GAP, summarise_variant

REPEAT_GAP = 0.1  # nats: a loss on the repeated copy this much above the baseline's counts as worse (one seed)
QUANTITIES = ("final validation loss", "induction share (best head)", "loss on the repeated copy")


@dataclass
class Reading(Result):
    quantity: str  # one of QUANTITIES
    variant: float
    baseline: float
    rule: str  # when this reading counts the variant as worse
    worse: bool
    digits: int = 3  # how many decimals the numbers are said with


@dataclass
class Verdict(Result):
    claim: str  # "1/d learns worse than 1/√d"
    variant: str  # the variant's name in the run ("inv", "tied")
    baseline: str  # the baseline's ("sqrt", "untied")
    readings: list[Reading]
    unmeasured: list[str] = field(default_factory=list)  # quantities this run did not measure

    @property
    def holds(self) -> bool | None:
        """True when every reading shows the variant worse, False when none does, None when they disagree."""
        worse = {r.worse for r in self.readings}
        return None if len(worse) > 1 else worse.pop()

    def agreeing(self, worse: bool) -> list[Reading]:
        return [r for r in self.readings if r.worse == worse]


def compare(result, variant: str, baseline: str, claim: str) -> Verdict | None:
    """The claim that ``variant`` learned worse than ``baseline`` in ``result`` (a TrainResult), read on every
    measurement both took; None unless both ran."""
    v = result.variants
    if variant not in v or baseline not in v or not v[variant].val_loss or not v[baseline].val_loss:
        return None
    a, b = summarise_variant(baseline, v[baseline]), summarise_variant(variant, v[variant])
    gap = math.inf if b.diverged_at is not None else b.val_end - a.val_end
    readings = [Reading(QUANTITIES[0], b.val_end, a.val_end, f"worse when more than {LOSS_GAP} above", gap > LOSS_GAP)]
    cv, cb = v[variant].circuits, v[baseline].circuits
    if cv is None or cb is None:
        return Verdict(claim, variant, baseline, readings, list(QUANTITIES[1:]))
    share, rule = cv.best("induction").induction, cb.induction_share
    base_share = cb.best("induction").induction
    readings.append(Reading(QUANTITIES[1], share, base_share, f"worse when below {rule} while the other's is not",
                            share < rule <= base_share, digits=2))
    readings.append(Reading(QUANTITIES[2], cv.loss_repeat, cb.loss_repeat, f"worse when more than {REPEAT_GAP} above",
                            cv.loss_repeat - cb.loss_repeat > REPEAT_GAP, digits=2))
    return Verdict(claim, variant, baseline, readings)
