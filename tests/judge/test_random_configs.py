"""Seeded random configurations, 250 per form: every form passes the tolerance rule on all of them, and the judge
fails wrong functions (tests/mutants.py) on the same kind of configurations.

Batch dims (0-2), GQA and MQA, L != S, E != Ev, odd sizes, every mask kind and mask function,
causal, learnable biases, any scale (negative too), dropout, float32 and float64; output and
gradients. The sizes are small so the suite stays fast; benchmarks/verify_sweep.py runs more and
larger configurations.
"""

import collections

import pytest

import attnlab
from attnlab.judge import verify
from tests import mutants

N_CONFIGS = 250

pytestmark = pytest.mark.slow  # 250 configurations a form: the file took 7 s alone on an idle 2-core AMD EPYC


def _report(rows):
    counts = collections.Counter((r.form, r.status) for r in rows)
    worst = collections.defaultdict(float)
    for r in rows:
        if r.worst is not None and r.worst.allowed > 0:
            worst[r.form] = max(worst[r.form], r.worst.err / r.worst.allowed)
    print(dict(counts), {f: round(w, 3) for f, w in worst.items()})
    bad = [(r.form, r.case, r.dtype, r.status, r.worst, r.detail) for r in rows if r.status != "pass"]
    assert not bad, bad[:5]


def test_matrix_and_flash_pass_250_random_configs():
    forms = {f: attnlab.forms()[f].fn for f in ("matrix", "flash")}
    cases = verify.random_cases(N_CONFIGS, seed=1, max_len=9, max_dim=12, max_batch=2)
    rows = [row for i, c in enumerate(cases) for row in verify.check_forms(forms, c, 1 + i)]
    assert len(rows) == 2 * N_CONFIGS
    assert {c.mask for c in cases} >= set(verify.MASK_KINDS)
    assert any(c.scale is not None and c.scale < 0 for c in cases) and any(c.dropout_p for c in cases)
    _report(rows)


@pytest.mark.long  # the loops form in Python, 250 configurations; the matrix and flash forms take theirs in make test
def test_loops_passes_250_random_configs():
    cases = verify.random_cases(N_CONFIGS, seed=2, max_len=5, max_dim=6, max_batch=2)
    rows = [row for i, c in enumerate(cases) for row in verify.check_forms({"loops": attnlab.forms()["loops"].fn}, c,
                                                                              2 + i)]
    _report(rows)


def _one_key_a_row(c) -> bool:
    """Every row sees one key at most: one key a row shows no scale (its weight is 1 at any). A sliding window of
    max(1, S // 5) keys (S // 12 beside the lower-right mask) is one key wide at these lengths."""
    S = c.S or c.L
    return S == 1 or (c.mask == "sliding_window" and S // 5 <= 1) or (
        c.mask == "causal_lower_right & sliding_window" and S // 12 <= 1)


# a bug of the corpus (tests/mutants.py) -> the cases where its switch is thrown
SHOWS = {"ignores scale=": lambda c: c.scale is not None and not _one_key_a_row(c),
         "ignores dropout_p": lambda c: c.dropout_p > 0,
         "dropout survivors not scaled": lambda c: c.dropout_p > 0, "GQA with repeat": lambda c: (c.Hkv or 1) > 1,
         "ignores is_causal": lambda c: c.is_causal, "ignores attn_mask": lambda c: c.mask is not None}


def test_the_judge_fails_wrong_functions_on_random_configs_and_passes_right_ones():
    """Functions that are not attnlab's (their own dropout, probed): the right ones pass every case; each wrong one
    fails only cases where its bug is switched on, and most of those (a case may hide it: no live weight left)."""
    cases = verify.random_cases(40, seed=3, max_len=9, max_dim=12, max_batch=2)
    assert all(sum(shows(c) for c in cases) >= 1 for shows in SHOWS.values())
    right = {n: f for n, f in mutants.CORRECT.items() if n != "PyTorch's own"}
    result = verify.verify(right | {n: mutants.MUTANTS[n][0] for n in SHOWS}, cases, seed=3, timeout=None)
    _report([r for r in result.rows if r.form in right])
    for name, shows in SHOWS.items():
        failed = [r.status != "pass" for r in result.rows if r.form == name]
        where = [shows(c) for c in cases]
        print(name, f"fails {sum(failed)} of the {sum(where)} cases its bug is on")
        assert not any(f and not w for f, w in zip(failed, where, strict=True)), name
        assert sum(failed) >= 0.75 * sum(where), name
