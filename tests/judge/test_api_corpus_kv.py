"""The varlen and paged-decode kernels of the blind corpus (tests/api_mutants.py, written by someone who had not read
the detectors) through verify at seeds 0-4: each single bug named by the first line, every bug of a two-bug kernel
among the lines in at least 90 %, no line naming a bug the kernel does not have, no right kernel failed. The
corpus's labels are read as the keys of attnlab.judge.causes that name them (tests/kv_bugs.LABEL_KEYS). The
forward is judged (output and log-sum-exp: every bug here shows there; the gradients of the corpus's Python tile
loops would take an hour more). Prints the table."""

from dataclasses import replace

import pytest

from tests import api_mutants, kv_bugs

pytestmark = [pytest.mark.slow, pytest.mark.long]  # two dozen kernels, five seeds (half an hour)
# The corpus's paged kernels write k=, v= into copies of the caches (tests/api_corpus/paged.py says so), where
# flash_attn_with_kvcache writes them into the caller's: each gets this line on the cases that append, truthfully.
# It is counted apart: a right kernel fails with it alone, on those cases alone; the other lines are held to the bar.
COPIES = "paged-cache-not-written"
APIS = ("flash-attn-varlen", "paged-decode")
DTYPES = {"scores-low-precision": ("bfloat16",), "scale-folded-low-precision": ("bfloat16",)}


def kernels():
    return {name: (fn, api, labels) for name, (fn, api, labels) in api_mutants.CORPUS.items() if api in APIS}


def outcome(name: str, seed: int) -> kv_bugs.Outcome:
    fn, api, labels = kernels()[name]
    want = [kv_bugs.LABEL_KEYS[label] for label in labels]
    dtypes = next((DTYPES[label] for label in labels if label in DTYPES), ("float32",))
    return kv_bugs.judge(f"{name} [seed {seed}]", fn, api, want, dtypes=dtypes, seed=seed, backward=False)


@pytest.fixture(scope="module")
def outcomes():
    return [outcome(name, seed) for seed in range(5) for name in kernels()]


def test_every_label_is_read():
    assert {label for *_, labels in kernels().values() for label in labels} <= set(kv_bugs.LABEL_KEYS)


def test_the_blind_corpus(outcomes):
    print(kv_bugs.table(outcomes))
    copies = [o for o in outcomes if COPIES in o.keys]
    for o in copies:
        assert all("append" in case for case in o.failed) or o.bugs, o  # a right kernel: the appending cases alone
    rest = [replace(o, keys=[k for k in o.keys if k != COPIES]) for o in outcomes]
    rest = [replace(o, counts={**o.counts, "fail": 0, "error": 0}) if not o.bugs and not o.keys else o for o in rest]
    print(f"{len(copies)} of {len(outcomes)} outcomes have the {COPIES} line; set aside:")
    print(kv_bugs.table(rest))
    assert not kv_bugs.failures(rest), kv_bugs.failures(rest)
