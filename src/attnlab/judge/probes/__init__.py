"""Probes: a kernel's semantics measured on designed inputs, beside the random grid.

Each API has a handful of probe cases (:mod:`.cases`): small problems whose inputs are designed (:mod:`.design`) so
that the function's answer *is* a part of its semantics -- with q = 0 and v one-hot per key the output is the
attention weights (who sees whom, and the bias added); designed q and k give the score function; one-hot v per kv
head the head map; one-hot dO the weights the backward uses. They are judged as every case is, by the one rule
against the float64 oracle, so a probe fails where the function differs from the spec there; :mod:`.read` then says
the difference as facts -- "query 3 sees keys 1-7; the spec's keys 1-4: the last key seen is at i + 3; the spec's at
i" -- and :mod:`.learned` turns a difference that is a rule (the same shift in every row, one factor on every score)
into a question the grid's other failing cases are held to.
"""
