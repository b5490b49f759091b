"""verify's score-modifier cases: the oracle applies the same modifier; forms without one are skipped."""

import torch
import torch.nn.functional as F

import attnlab
from attnlab.judge import mod_cases, rule, verify
from attnlab.kernels import mods

MOD_CASES = [c for c in verify.default_cases(["float32", "float64"], long=False) if c.mod]


def test_mod_cases_cover_every_family_and_learnable_tensors():
    assert {c.mod for c in MOD_CASES} == set(mod_cases.MOD_FAMILIES)
    assert {c.dtype for c in MOD_CASES if c.mod in mod_cases.FLOAT64_ONLY} == {"float64"}
    r = verify.verify({"flash": attnlab.forms()["flash"].fn}, MOD_CASES)
    for row in r.rows:
        print(row.case, [(c.quantity, f"{c.err:.2e}", f"{c.allowed:.2e}") for c in row.comparisons])
    assert r.passed
    quantities = {c.quantity for row in r.rows for c in row.comparisons}
    assert {"dslopes", "dtable", "dbias"} <= quantities  # gradients of the modifier's own tensors are checked


def test_a_user_function_that_ignores_the_modifier_fails_and_one_without_it_is_skipped():
    def ignores(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                score_mod=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                              enable_gqa=enable_gqa)

    def plain(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    r = verify.verify({"ignores": ignores, "plain": plain}, MOD_CASES)
    status = {(row.form, row.case): row for row in r.rows}
    assert all(status[("ignores", c.name)].status == "fail" for c in MOD_CASES)
    assert all(status[("plain", c.name)].status == "skipped" for c in MOD_CASES)
    assert status[("plain", MOD_CASES[0].name)].detail == "takes no score_mod= keyword"


def naive(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, score_mod=None):
    """softmax(score_mod(q k^T / sqrt(E))) v as first written: a row whose every score is -inf becomes NaN."""
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
    N, H, L, S = s.shape
    s = score_mod(s, *mods.indices(N, H, 0, L, 0, S, q.device)) if score_mod is not None else s
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def test_the_grid_fails_nan_for_hidden_rows_and_a_gradient_that_never_arrives(monkeypatch):
    """The two modifier cases catch what they are there for: NaN where a modifier hides a whole row, and the
    flash form without the search for tensors a modifier reads unlisted (their gradient is left None)."""
    hide = next(c for c in MOD_CASES if c.mod == "hide rows" and c.dtype == "float32")
    unlisted = next(c for c in MOD_CASES if c.mod == "unlisted bias")
    softcap = next(c for c in MOD_CASES if c.mod == "softcap" and c.dtype == "float32")
    r = verify.verify({"naive": naive}, [softcap, hide])
    print([(row.case, row.status, row.detail) for row in r.rows])
    assert [row.status for row in r.rows] == ["pass", "fail"]
    assert verify.verify({"flash": attnlab.forms()["flash"].fn}, [unlisted]).passed
    monkeypatch.setattr(mods, "unlisted", lambda *a: ())
    (row,) = verify.verify({"flash": attnlab.forms()["flash"].fn}, [unlisted]).rows
    print(row.status, [(c.quantity, c.err, c.allowed) for c in row.comparisons])
    assert row.status == "fail" and [c.quantity for c in row.comparisons if not c.passed] == ["dbias"]


def test_pytorch_side_of_the_rule_is_pytorch_not_attnlab():
    """The eager and SDPA-with-bias baselines agree with the float64 oracle to float32 rounding."""
    from attnlab.judge import oracle

    case = next(c for c in MOD_CASES if c.mod == "relative_bias")
    q, k, v, mask, dense, _ = verify.make_inputs(case, 0)
    tensors, build = mod_cases.make(case.mod, case.H, 0, q.dtype)
    ref = oracle.reference(q, k, v, dense, case.is_causal, score_mod=build([t.double() for t in tensors]))
    for f in (mod_cases.eager, mod_cases.eager_folded, mod_cases.sdpa_bias):
        err = rule.max_err(f(q, k, v, dense, score_mod=build(tensors)), ref)
        print(f.__name__, f"{err:.2e}")
        assert err < 1e-5
