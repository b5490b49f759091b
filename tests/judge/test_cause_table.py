"""The judge's table of causes held whole: every cause a function can have is named first on its fixture.

Each key of :func:`attnlab.judge.causes.table` has a wrong function in tests/judge/cause_fixtures.py that has that
cause and no other, judged on the few cases of its API that show it (a small size, one dtype or two): the cause's
line must come first among its lines that name causes (a probe's measured difference may come beside it, as the
fact it is). A cause added to the table without a fixture fails here; so does a fixture whose line is lost. The
causes no function can have (the judge's own disagreement with PyTorch, a process that ends) are listed with the
test that holds them. The corpora's full runs are in make test-long (tests/judge/test_*corpus*.py).
"""

import pytest

from attnlab.judge import apis, causes, verify
from tests.helpers import named
from tests.judge.cause_fixtures import FIXTURES, NO_FUNCTION

KEYS = sorted(causes.table())
# the fixtures that take over a second of CPU (most run the full-precision and a half dtype, or tile loops in Python):
# slow-marked (make test-fast leaves them out; tests/costs.py holds every mark to its measured cost)
SLOW = {"L!=S", "bfloat16", "eps-in-sum", "flex-block-size", "flex-full-only", "flex-partial-as-full", "float32",
        "float32-in-float64", "float64", "mod-after-mask", "online-not-rescaled", "precision", "precision-unplaced",
        "softmax-half"}


def test_every_cause_of_the_table_has_a_fixture_or_says_why_none_can_exist():
    missing = [k for k in KEYS if k not in FIXTURES and k not in NO_FUNCTION]
    stale = [k for k in [*FIXTURES, *NO_FUNCTION] if k not in KEYS]
    assert not missing and not stale, (missing, stale)


def judged(key: str):
    fx = FIXTURES[key]
    cases = [c for c in apis.cases(fx.api, list(fx.dtypes), long=False) if not (c.api and apis.skip_reason(c))
             and (not fx.only or any(w.lower() in c.name.lower() for w in fx.only))
             and (not c.probe or any("probe" in w for w in fx.only))]  # the probes where asked for by name
    assert cases, key
    target = fx.fn if fx.api == "sdpa" else apis.Adapted(fx.fn, fx.api)
    kw = {"timeout": None, "check_dropout": True, **fx.kw}
    r = verify.verify({key: target}, cases, **kw)
    return r, r.diagnoses.get(key, [])


@pytest.mark.parametrize("key", [pytest.param(k, marks=[pytest.mark.slow] if k in SLOW else []) for k in KEYS
                                 if k in FIXTURES])
def test_each_cause_is_named_first_on_its_fixture(key):
    r, lines = judged(key)
    for d in lines:
        print(d.key, d.text[:160])
    assert not r.passed, key
    assert named(lines)[:1] == [key], (key, [d.key for d in lines])
