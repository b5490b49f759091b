"""The oracle, the tolerance rule, and the verify grid catch a wrong form."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.cli import _args
from attnlab.judge import oracle, rule, verify
from attnlab.judge.apart import isolate
from attnlab.judge.verify import Case
from tests.helpers import qkv


def wrong_scale(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                          scale=1.0 / q.shape[-1], enable_gqa=enable_gqa)


def nan_rows(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The classic bug: plain softmax gives NaN on rows with no visible key (pytorch#103963)."""
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.softmax(s, -1) @ v


def test_oracle_matches_pytorch_float64_with_gqa_and_mask():
    g = torch.Generator().manual_seed(0)
    q, k, v = qkv(2, 6, 3, 7, 9, 8, 5, generator=g)
    m = torch.randn(2, 1, 7, 9, generator=g, dtype=torch.float64)
    out = oracle.reference(q, k, v, m, enable_gqa=True)
    exp = F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)
    assert rule.max_err(out, exp) < 1e-13


def test_tolerance_rule_numbers():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    theirs = ref + 1e-6
    ok = rule.compare("out", (ref + 1.5e-6).float(), theirs.float(), ref, torch.float32, 0.0)  # the storing floor only
    bad = rule.compare("out", (ref + 5e-6).float(), theirs.float(), ref, torch.float32, 0.0)
    print(ok, bad, sep="\n")
    assert ok.passed and not bad.passed
    assert bad.allowed == pytest.approx(2 * bad.torch_err + rule.floor(ref, torch.float32))
    nan = rule.compare("out", torch.tensor([float("nan"), 2.0]), theirs.float(), ref, torch.float32, 0.0)
    assert not nan.passed


@pytest.mark.slow
@pytest.mark.parametrize("form", ["matrix", "flash"])
def test_form_passes_quick_grid_in_every_dtype(form, round_trip):
    cases = verify.default_cases(long=False)
    r = verify.verify({form: attnlab.forms()[form].fn}, cases)
    for row in r.rows:
        w = row.worst
        print(f"{row.case} [{row.dtype}] {row.status} {w.quantity} err={w.err:.2e} torch={w.torch_err:.2e}")
    assert r.passed, [(x.case, x.dtype, x.worst) for x in r.rows if x.status != "pass"]
    per_dtype = len(verify.default_cases(["float32"], long=False))
    assert len(r.rows) == len(cases) == per_dtype * 3 + 2  # + the float64-only ALiBi slopes and unlisted bias
    assert {row.case for row in r.rows} >= {f"mask fn: {n}" for n in verify.MASK_FAMILIES}
    round_trip(r)


@pytest.mark.slow
@pytest.mark.long  # the slowest form on the whole float64 grid; its quick grid stays in make test
def test_loops_passes_shrunk_float64_grid():
    cases = verify.default_cases(["float64"], long=False)
    r = verify.verify({"loops": attnlab.forms()["loops"].fn}, cases)
    assert r.passed, [(x.case, x.worst) for x in r.rows if x.status != "pass"]
    assert any("shrunk" in row.case for row in r.rows)


def test_wrong_forms_fail_the_grid():
    cases = [Case("basic", dtype="float32"), Case("fully masked rows", mask="dead-rows", dtype="float32")]
    r = verify.verify({"wrong_scale": wrong_scale, "nan_rows": nan_rows}, cases)
    status = {(row.form, row.case): row.status for row in r.rows}
    print(status)
    assert status[("wrong_scale", "basic")] == "fail"
    assert status[("nan_rows", "basic")] == "pass"
    assert status[("nan_rows", "fully masked rows")] == "fail"
    assert not r.passed


def test_dropout_cases_check_forms_with_and_without_attnlab_dropout():
    cases = [Case("dropout", dropout_p=0.3, L=8)]
    r = verify.verify({"sdpa": attnlab.forms()["sdpa"].fn, "flash": attnlab.forms()["flash"].fn}, cases)
    assert [row.status for row in r.rows] == ["pass", "pass"]


def test_a_form_that_raises_is_an_error_row_with_the_reason():
    def no_gqa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    r = verify.verify({"no_gqa": no_gqa}, [Case("GQA", batch=(1,), H=6, Hkv=2, L=8)])
    assert r.rows[0].status == "error"
    assert "enable_gqa" in r.rows[0].detail


def test_load_function_errors():
    assert _args.load_function("matrix")[1] is attnlab.forms()["matrix"].fn
    assert _args.load_function("torch.nn.functional:scaled_dot_product_attention")[1] is F.scaled_dot_product_attention
    for spec, msg in [("nosuchmod:f", "cannot import module 'nosuchmod'"), ("math:nope", "has no attribute 'nope'"),
                      ("math:pi", "names a float, not a function"), ("fast", "unknown impl 'fast'"),
                      (":f", "must look like package.module:function"),
                      ("ring", "runs only across the ranks of a torch.distributed process group; check it with "
                               "`attnlab ring`")]:
        with pytest.raises(isolate.LoadError, match=msg):
            _args.load_function(spec)
