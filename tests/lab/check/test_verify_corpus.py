"""verify against a corpus of wrong attention functions: it fails every one, passes every right one, and names
the cause of most (mutants.py holds the corpus, corpus.py runs it)."""

import pytest

import corpus
import mutants

pytestmark = pytest.mark.slow  # the corpus runs ~40 functions over the quick grid


@pytest.fixture(scope="module")
def outcome():
    return corpus.run(seed=0)


def test_every_mutant_fails_and_every_right_function_passes(outcome):
    result, out = outcome
    print(corpus.table(out))
    assert len(mutants.MUTANTS) >= 30
    alive = [name for name, o in out.items() if not o.killed]
    assert not alive, f"verify passed wrong functions: {alive}"
    for name in mutants.CORRECT:
        rows = [r for r in result.rows if r.form == name]
        bad = [(r.case, r.dtype, r.status, r.detail, r.worst) for r in rows if r.status not in ("pass", "skipped")]
        assert rows and not bad, (name, bad[:3])
        assert {r.dtype for r in rows} == set(corpus.ALL)


def test_the_diagnoses_name_the_cause_of_most_mutants(outcome):
    _, out = outcome
    with_cause = [o for o in out.values() if o.want]
    first = [o.name for o in with_cause if o.first]
    named = [o.name for o in with_cause if o.named]
    missed = [(o.name, o.want, o.keys) for o in with_cause if not o.named]
    print(f"cause named first for {len(first)} of {len(with_cause)}, among the lines for {len(named)}; missed {missed}")
    assert len(first) >= 0.8 * len(with_cause) and len(named) >= 0.9 * len(with_cause), missed
    for o in out.values():  # never a diagnosis for a function that passed, always one for one that failed
        assert bool(o.keys) == o.killed, o
