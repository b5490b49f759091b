"""The varlen and paged-decode diagnoses on kernels with known bugs (tests/kv_bugs.py): each single bug named by
the first line, every bug of a two-bug kernel among the lines, no line naming a bug the kernel does not have, the
right kernels passed. The quick lane runs each kernel on a few cases of its API that show every bug; the long lane
on every case, at seeds 0-4."""

import pytest

from tests import kv_bugs as K

SOME = {  # a few cases per API that show every bug of the corpus (names contain one of these)
    "flash-attn-varlen": ("12 sequences of mixed lengths, causal", "chunked prefill", "queries and no keys",
                          "window (-1, 2)", "three queries a sequence"),
    "paged-decode": ("3 sequences of 1, 37, 64", "8 sequences", "4 queries, causal", "append 4, causal",
                     "append 3, not causal", "append 2, pages of 1", "append 3, window (3, 2)"),
}


@pytest.mark.parametrize("name", [*K.MUTANTS, *K.CORRECT])
def test_each_bug_is_named_and_no_other(name):
    api = K.MUTANTS[name][1] if name in K.MUTANTS else K.CORRECT[name][1]
    want = K.MUTANTS[name][3] if name in K.MUTANTS else ()
    o = K.judge(name, K.function(name), api, want, only=SOME[api])
    print(K.table([o]))
    if not want:
        assert not o.killed and o.counts["pass"] == sum(o.counts.values()), o
        return
    assert o.killed and o.first and o.named and not o.false, o


@pytest.mark.long
@pytest.mark.slow  # every kernel on every case of its API, five seeds (minutes)
def test_the_corpus_on_every_case_at_five_seeds():
    rows = []
    for seed in range(5):
        for name in [*K.MUTANTS, *K.CORRECT]:
            api = K.MUTANTS[name][1] if name in K.MUTANTS else K.CORRECT[name][1]
            want = K.MUTANTS[name][3] if name in K.MUTANTS else ()
            o = K.judge(f"{name} [seed {seed}]", K.function(name), api, want, seed=seed)
            rows.append(o)
    print(K.table(rows))
    assert not K.failures(rows), K.failures(rows)


@pytest.mark.slow
def test_rows_left_empty_name_no_reading_that_empties_them_too():
    """A varlen kernel that stops at an empty sequence leaves every later sequence's rows empty. Readings that empty
    some of those rows too (queries shifted, causal on packed rows, max_seqlen_k) were named on those rows alone; a
    case met only on rows a reading leaves empty joins a line other cases name by their numbers, and names nothing
    by itself: the probe's measured rows come first, and no varlen cause is said."""
    name = "varlen stops at an empty sequence"
    o = K.judge(name, K.function(name), "flash-attn-varlen", K.MUTANTS[name][3])
    print(K.table([o]))
    assert o.killed and o.first and not o.false, o


# The cases of this module measured over 0.3 s of CPU in two runs of make test (tests/costs.py; AMD EPYC, 2 cores),
# where the module's others take hundredths: slow-marked (tests/conftest.py), so make test-fast leaves them to make
# test
SLOW_CASES = {
    "test_each_bug_is_named_and_no_other[paged page id + 1, whole last page]",
    "test_each_bug_is_named_and_no_other[paged page id + 1]",
    "test_each_bug_is_named_and_no_other[varlen end inclusive]",
    "test_each_bug_is_named_and_no_other[varlen keys early, top-left]",
    "test_each_bug_is_named_and_no_other[varlen keys one row early]",
    "test_each_bug_is_named_and_no_other[varlen keys one row late]",
    "test_each_bug_is_named_and_no_other[varlen max_seqlen_k for every sequence]",
    "test_each_bug_is_named_and_no_other[varlen packing ignored]",
    "test_each_bug_is_named_and_no_other[varlen queries one row late]",
    "test_each_bug_is_named_and_no_other[varlen stops at an empty sequence]",
}
