"""One cause does not hide another: where two bugs fail the same rows, both are named (issue 42 §3).

A kernel whose causal mask is aligned lower-right and whose rows with no key return the mean of V fails the
L > S causal rows in two ways at once: under upper-left alignment no row there is empty, so neither the
alignment alone (its empty rows are zeros) nor the dead rows alone (the oracle has none) match the output.
Explained row by row, the alignment explains the rows that see keys and its own empty rows hold the mean of V.
"""

import pytest

from attnlab.judge import verify
from tests import mutants
from tests.helpers import named


def _named(bug, names):
    cases = [c for c in verify.default_cases(["float32"], long=False) if c.name in names]
    assert len(cases) == len(names), [c.name for c in cases]
    fn = mutants._bug(mutants.attend, bug)
    r = verify.verify({"f": fn}, cases, timeout=None)
    for row in r.rows:
        print(row.case, row.status, row.hints)
    print([d.text for d in r.diagnoses.get("f", [])])
    return r, named(r.diagnoses.get("f", []))


def test_lower_right_alignment_and_mean_of_v_dead_rows_are_both_named_on_the_same_rows():
    r, keys = _named(("lower-right", "minus-1e9"), ["L>S causal upper-left"])
    (row,) = r.rows
    said = set(map(str, row.hints))
    assert row.status == "fail" and {"lower-right-for-upper-left", "dead-rows", "dead-rows=mean"} <= said
    assert set(keys) == {"causal-alignment", "dead-rows"}, keys
    assert "the mean of V" in next(d.text for d in r.diagnoses["f"] if d.key == "dead-rows")


def test_two_bugs_on_every_row_are_named_as_a_pair():
    r, keys = _named(("scale-ignored", "gqa-repeat"), ["scale=0.3 as a 0-d tensor, GQA 4/2"])
    (row,) = r.rows
    assert {"scale-ignored", "gqa-repeat"} <= set(map(str, row.hints)), row.hints


def test_a_wrong_mask_that_empties_a_row_through_a_plain_softmax_is_the_masks_line_alone():
    # the diagonal hidden: query 0 sees nothing, and a plain softmax makes its row NaN -- the mask's doing
    r, keys = _named(("diagonal", "nan-rows"), ["causal"])
    (row,) = r.rows
    assert list(map(str, row.hints)) == ["diagonal"], row.hints


def _kv_rows(name, api, case_names, seed=0):
    from attnlab.judge import apis
    from tests import kv_bugs

    cases = [c for c in apis.cases(api, ["float32"], long=False) if c.name in case_names]
    assert len(cases) == len(case_names), [c.name for c in cases]
    r = verify.verify({name: apis.Adapted(kv_bugs.function(name), api)}, cases, check_dropout=False, timeout=None,
                      seed=seed)
    for row in r.rows:
        print(row.case, row.status, row.hints, row.facts.problems)
    return r.rows, named(r.diagnoses.get(name, []))


def test_a_bug_that_alone_comes_close_to_no_row_is_found_on_top_of_the_other():
    # keys read a row early and the causal diagonal aligned top-left: where a sequence has more keys than queries,
    # top-left alone matches no row (its diagonal is placed in keys that start a row early), yet the pair does
    rows, _ = _kv_rows("varlen keys early, top-left", "flash-attn-varlen", [
        "varlen: causal, keys longer (chunked prefill)", "varlen: decoding, one query a sequence, causal"])
    for row in rows:
        assert row.status == "fail" and list(map(str, row.hints)) == ["varlen-keys-early", "varlen-top-left"], row.hints


@pytest.mark.parametrize("seed", range(3))
def test_two_pairs_that_explain_the_same_rows_alike_tie_and_the_other_cases_settle_it(seed):
    # top-left with the new keys written a slot late: the top-left diagonal sees the new keys' first slot as it was
    # before the call, as a kernel that never wrote them would (stale) -- the same answer; the alignment is named,
    # the other two tie, and the case without a diagonal (where only the slot late fits) settles it: the stale
    # reading, tied with the slot late wherever it is named and named on fewer cases, is its shadow, taken out of
    # the tie (kept in the row's refuted)
    rows, keys = _kv_rows("paged top-left, one slot late", "paged-decode",
                          ["paged: append 4, causal", "paged: append 3, not causal"], seed)
    tied = next(r for r in rows if r.case == "paged: append 4, causal")
    assert list(map(str, tied.hints)) == ["paged-top-left", "paged-new-kv-wrong-slot"], tied.hints
    assert "paged-new-kv-stale" in tied.refuted, tied.refuted
    assert "paged-top-left" in keys and "paged-new-kv-wrong-slot" in keys and "paged-new-kv-stale" not in keys, keys


def test_a_row_the_function_answers_as_a_cause_is_that_causes_though_the_two_answers_are_close():
    """Masked scores set to 0 at scale=3: on a row or two the wrong answer is nearer the right one than twice the
    tolerance, and the function gives it to 1e-6 there; those rows are that cause's, not another's that fits them
    loosely (zero pad keys attended)."""
    r, keys = _named("mask-zero", ["scale=3, causal"])
    assert list(map(str, r.rows[0].hints)) == ["mask-zero"] and keys == ["mask-zero"], (r.rows[0].hints, keys)


def test_a_rounding_that_reaches_only_a_gradient_on_some_case_is_the_roundings_line():
    """A running sum kept in bfloat16: on a learnable float mask only dmask is over its limit. The precision cause
    named on the other bfloat16 cases says it; no line of a wrong backward of its own."""
    cases = [c for c in verify.default_cases(["bfloat16"], long=False)
             if c.name in ("bool mask", "float mask", "float mask, learnable bias")]
    r = verify.verify({"f": mutants._bug(mutants.attend, "sum-in-dtype")}, cases, timeout=None)
    for row in r.rows:
        print(row.case, row.status, row.hints, [(c.quantity, c.passed) for c in row.comparisons])
    keys = named(r.diagnoses.get("f", []))
    assert keys == ["scores-rounded"], keys
