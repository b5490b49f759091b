"""Seeded random configurations, 500 per form: every form passes the tolerance rule on all of them.

Batch dims (0-2), GQA and MQA, L != S, E != Ev, odd sizes, every mask kind and mask function,
causal, learnable biases, any scale (negative too), dropout, float32 and float64; output and
gradients. The sizes are small so the suite stays fast; benchmarks/verify_sweep.py runs more and
larger configurations.
"""

import collections

import pytest

import attnlab
from attnlab.lab.check import verify

N_CONFIGS = 500

pytestmark = pytest.mark.slow  # 500 configurations a form: minutes on 2 cores


def _report(rows):
    counts = collections.Counter((r.form, r.status) for r in rows)
    worst = collections.defaultdict(float)
    for r in rows:
        if r.worst is not None and r.worst.allowed > 0:
            worst[r.form] = max(worst[r.form], r.worst.err / r.worst.allowed)
    print(dict(counts), {f: round(w, 3) for f, w in worst.items()})
    bad = [(r.form, r.case, r.dtype, r.status, r.worst, r.detail) for r in rows if r.status != "pass"]
    assert not bad, bad[:5]


def test_matrix_and_flash_pass_500_random_configs():
    forms = {f: attnlab.forms()[f].fn for f in ("matrix", "flash")}
    cases = verify.random_cases(N_CONFIGS, seed=1, max_len=9, max_dim=12, max_batch=2)
    rows = [row for i, c in enumerate(cases) for row in verify.check_forms(forms, c, 1 + i)]
    assert len(rows) == 2 * N_CONFIGS
    assert {c.mask for c in cases} >= set(verify.MASK_KINDS)
    assert any(c.scale is not None and c.scale < 0 for c in cases) and any(c.dropout_p for c in cases)
    _report(rows)


def test_loops_passes_500_random_configs():
    cases = verify.random_cases(N_CONFIGS, seed=2, max_len=5, max_dim=6, max_batch=2)
    rows = [row for i, c in enumerate(cases) for row in verify.check_forms({"loops": attnlab.forms()["loops"].fn}, c,
                                                                              2 + i)]
    _report(rows)


def test_pytorch_itself_passes_500_random_configs_with_its_own_dropout():
    sdpa = attnlab.forms()["sdpa"].fn
    cases = verify.random_cases(N_CONFIGS, seed=3, max_len=9, max_dim=12, max_batch=2)
    rows = [verify.check_case("sdpa", sdpa, c, 3 + i, accepts_masks=True, shared_dropout=False)
            for i, c in enumerate(cases)]
    _report(rows)
