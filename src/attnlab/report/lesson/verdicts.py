"""What the training runs showed, each claim beside the rule that decides it, and said plainly when it did not hold.

The page never ticks a claim its own numbers contradict. Each verdict here is read from a result
computed in :mod:`attnlab.train.summary` (the predictions, the 1/d comparison with its
query/key norms) and :mod:`attnlab.train.verdict` (a variant against its baseline on every
measurement that bears on it: validation loss, induction share, loss on the repeated copy); this
module only words it, every number and rule beside it, and says so when the measurements disagree.
"""

from __future__ import annotations

import math
from html import escape

from attnlab.train import summary as ts
from attnlab.train import verdict as tv

NAMES = {"sqrt": "1/√d", "none": "no scale", "inv": "1/d", "tied": "tied", "untied": "separate"}


def mark(ok: bool) -> str:
    return ('<span class="verdict holds">✓ holds</span>' if ok else
            '<span class="verdict fails">✗ does not hold at these settings</span>')


def scale(result) -> str:
    """The three predictions of the 1/√d ablation, each with its evidence and rule, and the overall verdict."""
    summaries, preds = ts.summarise(result)
    if not preds:
        return ""
    items = "".join(f"<li>{escape(p.claim)}: {mark(p.holds)} <span class=\"evidence\">{escape(p.evidence)}</span>"
                    "</li>" for p in preds)
    if ts.destabilised(preds):
        head = ("<p><b>Removing the 1/√d scale visibly destabilised training</b>: measured — the unscaled softmax "
                "stayed saturated and its loss ended above the scaled model's.</p>")
    else:
        head = ("<p><b>Removing the 1/√d scale visibly destabilised training</b>: <b>measured, and it did not "
                "hold at these settings.</b> The lesson predicts a saturated softmax and a worse loss; the rules "
                "below say which part this run did not show. A small model can learn around a saturated softmax for "
                "a while (the values and the MLP still train), so the gap shows more clearly with wider heads and "
                "longer runs (<code>attnlab train --preset large</code>).</p>")
    v = tv.compare(result, "none", "sqrt", "without the scale the model learns worse")
    more = ("" if v is None else f"<p>Unscaled against scaled, on every measurement of the run that bears on what it "
            f"learned: {overall(v)}</p>{readings(v)}{disagreement(v)}")
    return f'{head}<ul class="verdicts">{items}</ul>{more}'


def overall(v) -> str:
    """The mark for a verdict read on several measurements: holds, does not hold, or they disagree."""
    if v.holds is None:
        return '<span class="verdict mixed">◐ the measurements disagree</span>'
    return mark(v.holds)


def reading_text(r, v) -> str:
    """One measurement of a verdict: both numbers, the difference, the rule, and what it says."""
    f = f".{r.digits}f"
    return (f"{r.quantity}: {r.variant:{f}} {NAMES.get(v.variant, v.variant)} against {r.baseline:{f}} "
            f"{NAMES.get(v.baseline, v.baseline)} ({r.variant - r.baseline:+{f}}; rule: {r.rule}) — "
            + ("worse" if r.worse else "not worse"))


def readings(v) -> str:
    """Every measurement the verdict rests on, its numbers and rule, and what the run did not measure."""
    items = "".join(f"<li>{escape(reading_text(r, v))}</li>" for r in v.readings)
    if v.unmeasured:
        items += f"<li>not measured in this run: {escape(', '.join(v.unmeasured))}</li>"
    return f'<ul class="verdicts readings">{items}</ul>'


def disagreement(v) -> str:
    """When the measurements disagree: which say worse and which do not, as a paragraph ("" when they agree)."""
    return "" if v.holds is not None else f"<p>{escape(disagreement_text(v))}</p>"


def disagreement_text(v) -> str:
    """Which measurements say the variant did worse and which do not, in plain words."""
    worse, fine = ([r.quantity for r in v.agreeing(w)] for w in (True, False))
    say = lambda qs: f"the {' and the '.join(qs)} {'says' if len(qs) == 1 else 'say'}"  # noqa: E731
    name = NAMES.get(v.variant, v.variant)
    loss = [tv.QUANTITIES[0]]
    what = (f": {name} predicted the text about as well, but did not learn to copy a sequence it had just read as "
            f"the {NAMES.get(v.baseline, v.baseline)} model did" if fine == loss else
            f": {name} learned to copy as well, but predicted the text worse" if worse == loss else "")
    return (f"The measurements disagree: {say(fine)} {name} did as well, {say(worse)} it did worse{what}. Neither "
            "number alone is the answer.")


def _times(x: float) -> str:
    return f"×{x:.2f}" if x < 10 else f"×{x:.0f}"


def small_scale(result) -> str:
    """1/d against 1/√d: the claim, what the final losses say, and what the query/key norms did."""
    s = ts.small_scale(result)
    if s is None:
        return ""
    at_init = (f"At step 0 — the lesson's point — the 1/d model's softmax entropy was {s.entropy_start_inv:.2f} nats "
               f"against {s.entropy_start_sqrt:.2f} for 1/√d; an even spread is {s.uniform:.2f}: "
               + ("nearly uniform (within 10 % of it), so its weights start almost blind to the scores."
                  if s.nearly_uniform_at_start else "not within 10 % of uniform at these settings."))
    grew, ratio = s.inv_grew, s.score_ratio_end
    norms = ""
    if grew is not None:
        norms = (f" During training the 1/d model's ‖W_q‖·‖W_k‖ went from {s.qk_start_inv:.1f} to {s.qk_end_inv:.1f} "
                 f"({_times(s.qk_end_inv / s.qk_start_inv)}), the 1/√d model's from {s.qk_start_sqrt:.1f} to "
                 f"{s.qk_end_sqrt:.1f} ({_times(s.qk_end_sqrt / s.qk_start_sqrt)}). Every score grows with that "
                 f"product, so 1/d grew its scores {_times(grew)} as much as 1/√d did.")
        if ratio is not None:
            start = 1 / math.sqrt(s.head_dim)
            norms += (f" With d = {s.head_dim}, 1/d starts with scores {start:.2f} of 1/√d's; by the end they were "
                      f"{ratio:.2f} of them: " + ("it undid most of the smaller scale." if ratio >= 0.7 else
                                                  "it undid part of the smaller scale." if ratio >= 1.5 * start else
                                                  "the smaller scale stood."))
    v = tv.compare(result, "inv", "sqrt", "1/d learns worse than 1/√d")
    claim = (f"<p><b>1/d learns worse than 1/√d</b>: {overall(v)} — read on every measurement of the run that bears "
             f"on it:</p>{readings(v)}{disagreement(v)}")
    if v.holds is False:
        why = (" So here softer attention did as well" + (f" (its entropy ended at {s.entropy_end_inv:.2f} nats "
                                                          f"against {s.entropy_end_sqrt:.2f})"
                                                          if s.entropy_end_inv is not None else "")
               + ". Why it can, not tested here: a model this small, trained for minutes, may need little more than a "
               "soft softmax gives. The lesson's point, weights nearly uniform at the start, is measured above; a "
               "worse final loss is not.")
        if ratio is not None and ratio >= 0.7:
            why = (" A trained model is not stuck with its scale: this one grew its query and key weights until its "
                   "scores were nearly as spread as 1/√d's.")
        norms += why
    return claim + f"<p>{escape(at_init, quote=False)}{escape(norms, quote=False)}</p>"


def tie_kv(result) -> str:
    """Tied against separate value projections: the rule's verdict, and the reasons it can fail, marked as untested."""
    summaries, _ = ts.summarise(result)
    p = ts.tie_kv(summaries)
    if p is None:
        return ""
    v = tv.compare(result, "tied", "untied", p.claim)
    out = (f"<p><b>{escape(p.claim.capitalize())}</b>: {overall(v)} — read on every measurement of the run that bears "
           f"on it (one seed):</p>{readings(v)}{disagreement(v)}")
    if v.holds is False:
        out += ("<p>So at these settings tying them cost nothing measurable. Reasons it can, not tested here: the "
                "MLP after each attention layer can reshape what a tied value hands over; a model this small may "
                "not yet need keys and values to differ; and one seed's difference of a few hundredths is within what "
                "another seed would move.</p>")
    return out
