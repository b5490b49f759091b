"""verify against a corpus of wrong attention functions: it fails every one, passes every right one, and names
the cause of most (mutants.py holds the corpus, corpus.py runs it)."""

import pytest

from tests import corpus, mutants

pytestmark = [pytest.mark.slow, pytest.mark.long]  # the corpus runs ~40 functions over the quick grid (~2 min)


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


def test_the_diagnoses_name_every_cause_and_no_other(outcome):
    _, out = outcome
    single = [o for o in out.values() if len(o.bugs) == 1]
    multi = [o for o in out.values() if len(o.bugs) > 1]
    assert len(multi) >= 6 and any(len(o.bugs) == 3 for o in multi)
    not_first = [(o.name, o.want, o.keys) for o in single if not o.first]
    missed = [(o.name, o.want, o.keys) for o in multi if not o.named]
    false = [(o.name, o.false) for o in out.values() if o.false]
    print(f"single named first {len(single) - len(not_first)} of {len(single)}; several all named "
          f"{len(multi) - len(missed)} of {len(multi)}; false {false}")
    assert not not_first, not_first
    assert len(missed) <= 0.1 * len(multi), missed
    assert not false, false
    for o in out.values():  # never a diagnosis for a function that passed, always one for one that failed
        assert bool(o.keys) == o.killed, o
