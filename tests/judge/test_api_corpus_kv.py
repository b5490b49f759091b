"""The varlen and paged-decode kernels of the blind corpus (tests/api_mutants.py, written by someone who had not read
the detectors) through verify, forward only, at seed 0 (benchmarks/api_corpus.py runs seeds 0-4): each single bug
named by the first line, every bug of a two-bug kernel among the lines in at least 90 %, no line naming a bug the
kernel does not have, no right kernel failed. The labels are read by tests/kv_bugs.LABEL_KEYS. Prints the table."""

import pytest

from tests import api_corpus_run as R
from tests import kv_bugs


@pytest.fixture(scope="module")
def outcomes():
    return R.run_kv(seed=0)


def test_every_label_is_read():  # (no kernel runs: a fast test of make test)
    assert {label for *_, labels in R.kv_kernels().values() for label in labels} <= set(kv_bugs.LABEL_KEYS)


@pytest.mark.long  # two dozen kernels at one seed (benchmarks/api_corpus.py: five)
@pytest.mark.slow
def test_the_blind_corpus(outcomes):
    print(kv_bugs.table(outcomes))
    copies = [o for o in outcomes if R.COPIES in o.keys]
    for o in copies:
        assert all("append" in case for case in o.failed) or o.bugs, o  # a right kernel: the appending cases alone
    rest = R.set_aside(outcomes)
    print(f"{len(copies)} of {len(outcomes)} outcomes have the {R.COPIES} line; set aside:")
    print(kv_bugs.table(rest))
    assert not kv_bugs.failures(rest), kv_bugs.failures(rest)
