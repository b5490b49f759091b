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
# the fixtures make test-fast runs: those measured under 0.3 s of CPU in two runs of make test (tests/costs.py; AMD
# EPYC, 2 cores). The others -- most run several cases through the judge's readings, a half dtype, or tile loops in
# Python -- are slow-marked: make test holds every one, make test-fast the quick ones, and tests/costs.py holds each
# mark to its measured cost (a new cause's fixture is slow until measured quick)
QUICK = {"Ev!=E", "alibi", "batch-dims", "broadcast-mask", "causal+mask", "causal-alignment", "causal-ignored",
         "causal-offset-sign", "causal-reversed", "dead-rows", "diagonal", "dropout", "dropout-renormalised",
         "dropout-scale", "dsink-axis", "dsink-form", "dsink-sign", "dsink-zero", "dtype", "exit", "exp-half",
         "flash-alibi-offset", "flash-alibi-one-row", "flash-alibi-signed", "flash-softcap-scale",
         "flash-window-edge", "flash-window-swapped", "flex-mod-kv-head", "float-mask", "gqa", "grad-mask",
         "gradients-only", "hangs", "in-place", "inference-mode-in-place", "inference-mode-output",
         "inference-mode-raises", "lse-base2", "lse-dead-rows", "lse-shift", "lse-unscaled", "mask-zero", "no-grad",
         "no-grad-in-place", "no-grad-output", "no-grad-raises", "no-lse", "not-a-tensor", "over-ratio",
         "paged-cache-not-written", "paged-cache-touched", "paged-cache-written", "paged-cache-wrong-slots",
         "paged-new-kv-stale", "paged-new-kv-unseen", "paged-new-kv-wrong-slot", "paged-seqlens-ignored",
         "paged-stale-slots", "paged-top-left", "raises", "requires-grad", "scale", "scale-tensor", "shape",
         "sink-backward", "sink-column-shifted", "sink-head", "sink-ignored", "sink-kv-head", "sink-masked",
         "sink-modified", "sink-not-in-lse", "sink-per-tile", "sink-query", "sink-scaled", "sink-unshifted",
         "softcap", "softmax-dim", "unclear", "varlen-causal-packed", "varlen-diagonal-from-max",
         "varlen-lse-padded", "varlen-top-left", "window", "window-left", "window-right"}


def test_every_cause_of_the_table_has_a_fixture_or_says_why_none_can_exist():
    missing = [k for k in KEYS if k not in FIXTURES and k not in NO_FUNCTION]
    stale = [k for k in [*FIXTURES, *NO_FUNCTION, *QUICK] if k not in KEYS]
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


@pytest.mark.parametrize("key", [pytest.param(k, marks=[] if k in QUICK else [pytest.mark.slow]) for k in KEYS
                                 if k in FIXTURES])
def test_each_cause_is_named_first_on_its_fixture(key):
    r, lines = judged(key)
    for d in lines:
        print(d.key, d.text[:160])
    assert not r.passed, key
    assert named(lines)[:1] == [key], (key, [d.key for d in lines])
