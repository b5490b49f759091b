"""The section on two heads composing: how a previous-token head and an induction head copy, with this model's numbers.

The numbers are those :func:`attnlab.train.circuits.measure` took on the model in the page when it was
built; each claim carries its rule and a ✓ only when the measurement meets it. The live part below
(copy.js) measures the learner's own sequence the same way.
"""

from __future__ import annotations


def _ok(yes: bool) -> str:
    return '<span class="verdict holds">✓</span>' if yes else '<span class="verdict fails">✗</span>'


def intro(c, source: str) -> str:
    how = ("<p>One head alone cannot copy. Two can, in two layers: a <b>previous-token head</b> in layer 0 puts its "
           "weight one step back, so each position now also carries which character came just before it; an "
           "<b>induction head</b> in layer 1 then compares the current character with those notes. The note that "
           "matches sits at the position just <i>after</i> the earlier copy of the current character, so that is where "
           "it looks, and it hands on what is there: the character that came next last time. On a sequence written "
           "twice this predicts the whole second copy (Olsson et al., 2022). This model was trained with such "
           "repeated random sequences mixed into its text, the known way to make a two-layer model grow both.</p>")
    if c is None:
        return how + "<p>This model's context is too short to measure the two heads on a repeated sequence.</p>"
    p, i = c.best("previous"), c.best("induction")
    measured = (f"<p>Measured when this page was built on the kind of text you type below, not the training's: "
                f"{c.describe()} (the numbers below each rule):</p><ul class=\"verdicts\">"
                f"<li>{_ok(c.previous_found)} layer {p.layer}, head {p.head} puts <b>{p.previous:.2f}</b> of its "
                f"weight one step back (a previous-token head needs at least {c.previous_share})</li>"
                f"<li>{_ok(c.induction_found)} layer {i.layer}, head {i.head} puts <b>{i.induction:.2f}</b> on the "
                f"characters right after the earlier copies of each character (at least <b>{c.lowest():.2f}</b> at "
                f"every length; an induction head needs at least {c.induction_share})</li>"
                f"<li>{_ok(c.copies)} the loss is <b>{c.loss_first:.2f}</b> nats per character on the first copy "
                f"and <b>{c.loss_repeat:.2f}</b> on the repeat (copying needs at most {c.loss_ratio} of the first)"
                "</li></ul>")
    if not c.found:
        why = ("it is seeded, never trained" if source == "seeded" else
               "its training did not grow them at these settings; the default <code>attnlab train</code> does")
        measured += f"<p><b>So this model does not copy</b>: {why}. The live part below shows what it does do.</p>"
    try_it = ("<p>Type a sequence of your own below (random letters work best: text repeats words, so a model "
              "can guess it without copying). Each heatmap is one head on your sequence written twice; the numbers "
              "are measured as above and as the head view measures every head: the weight on the characters right "
              "after <i>every</i> earlier copy of the query's character, over the characters that appeared "
              "before.</p>")
    return how + measured + try_it
