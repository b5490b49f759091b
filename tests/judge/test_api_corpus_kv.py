"""The varlen and paged-decode kernels of the blind corpus (tests/api_mutants.py, written by someone who had not read
the detectors) through verify at seeds 0-4: each single bug named by the first line, every bug of a two-bug kernel
among the lines in at least 90 %, no line naming a bug the kernel does not have, no right kernel failed. The
corpus's labels are read as the keys of attnlab.judge.causes that name them (tests/kv_bugs.LABEL_KEYS). The
forward is judged (output and log-sum-exp: every bug here shows there; the gradients of the corpus's Python tile
loops would take an hour more). Prints the table."""

import pytest

from tests import api_mutants, kv_bugs

pytestmark = [pytest.mark.slow, pytest.mark.long]  # two dozen kernels, five seeds (a quarter of an hour)
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
    single = [o for o in outcomes if len(o.bugs) == 1]
    multi = [o for o in outcomes if len(o.bugs) > 1]
    assert all(o.first for o in single), [(o.name, o.keys) for o in single if not o.first]
    assert sum(o.named for o in multi) >= 0.9 * len(multi), [(o.name, o.keys) for o in multi if not o.named]
    assert not any(o.false for o in outcomes), [(o.name, o.false) for o in outcomes if o.false]
    assert not any(o.killed for o in outcomes if not o.bugs), [o.name for o in outcomes if not o.bugs and o.killed]
