"""The oracle shares nothing with the forms, agrees with PyTorch in float64, and a bug on either side shows."""

import ast
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import attnlab
from attnlab import masks
from attnlab.judge import judge, oracle, rule, verify
from attnlab.judge.verify import Case
from tests.helpers import qkv


def test_the_oracle_imports_nothing_from_the_kernels():
    tree = ast.parse(inspect.getsource(oracle))
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    print(sorted(names))
    assert not [n for n in names if n.startswith("attnlab.kernels")]
    assert {n for n in names if n.startswith("attnlab")} <= {"attnlab.masks", "attnlab.shapes"}  # the definitions it
    # evaluates, and how shapes broadcast


@pytest.mark.parametrize("L, S", [(5, 5), (3, 8), (8, 3)])
def test_causal_bias_reads_as_the_variant_it_names(L, S):
    q, k, v, go = qkv(2, 2, 2, L, S, 8, grad_out=True)
    for bias in (causal_upper_left(L, S), causal_lower_right(L, S)):
        got = oracle.reference(q, k, v, bias, grad_out=go)
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        want = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=bias)
        want.backward(go)
        errs = [rule.max_err(a, b) for a, b in zip(got, (want, qq.grad, kk.grad, vv.grad), strict=True)]
        print(type(bias).__name__, bias.variant, errs)
        assert max(errs) < 1e-12


def test_a_flexattention_mask_that_indexes_a_tensor_is_asked_one_position_at_a_time():
    image_of_token = torch.tensor([0, 0, 1, 1, 1, 2])  # a Flamingo-style cross-attention mask: text sees its image

    def sees_its_image(b, h, q_idx, kv_idx):
        return image_of_token[q_idx] == kv_idx // 2

    q, k, v = qkv(1, 2, 2, 6, 6, 4)
    got = oracle.reference(q, k, v, masks.Mask.from_mod(sees_its_image))
    dense = image_of_token[:, None] == torch.arange(6)[None] // 2
    assert rule.max_err(got, F.scaled_dot_product_attention(q, k, v, attn_mask=dense)) < 1e-12


def test_ranks_broadcasting_gqa_and_dead_rows_as_pytorch():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 6, 5, 8, generator=g, dtype=torch.float64)  # rank 4 against keys of rank 5 (batch 2, 1)
    k = torch.randn(2, 1, 2, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 1, 2, 7, 4, generator=g, dtype=torch.float64)
    m = torch.rand(5, 7, generator=g) > 0.5
    m[1] = False  # a row with no visible key: zeros
    got = oracle.reference(q, k, v, m, enable_gqa=True)
    want = F.scaled_dot_product_attention(q.expand(2, 3, 6, 5, 8), k.expand(2, 3, 2, 7, 8), v.expand(2, 3, 2, 7, 4),
                                          attn_mask=m, enable_gqa=True)
    print(got.shape, rule.max_err(got, want))
    assert got.shape == (2, 3, 6, 5, 4) and rule.max_err(got, want) < 1e-12 and not got[..., 1, :].any()
    q2, k2, v2 = (t[0, 0, 0] for t in (q[None], k, v))  # (L, E) inputs: no batch, no head
    assert rule.max_err(oracle.reference(q2, k2, v2), F.scaled_dot_product_attention(q2, k2, v2)) < 1e-12


def test_gqa_reads_key_head_h_over_the_group_size():
    q, k, v = qkv(1, 6, 2, 4, 4, 8)
    got = oracle.reference(q, k, v, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1))
    wrong = F.scaled_dot_product_attention(q, k.repeat(1, 3, 1, 1), v.repeat(1, 3, 1, 1))
    assert rule.max_err(got, want) < 1e-12 and rule.max_err(got, wrong) > 0.1


# the grid's longest cases (the most each dtype affords) are most of its 14 s: they are in make test-long
@pytest.mark.slow
@pytest.mark.parametrize("long", [False, pytest.param(True, marks=pytest.mark.long)], ids=["quick grid", "long cases"])
def test_pytorch_in_float64_agrees_with_the_oracle_on_every_case_of_the_grid(long):
    worst = None
    quick = verify.default_cases(["float32", "bfloat16"], long=False)
    every = verify.default_cases(["float32", "bfloat16"], long=True)
    grid = quick if not long else [c for c in every if c not in quick]
    for i, case in enumerate(grid):
        x = verify.inputs(case, i)
        exp = judge.expect(case, i, x, verify.shared_keep(case, i))
        assert exp.cross.passed, (case.label, exp.cross)
        r = exp.cross.err / exp.cross.allowed
        worst = (r, case.label, exp.cross) if worst is None or r > worst[0] else worst
    print("worst float64 disagreement over the grid (err / limit, case, comparison):", worst)


def test_a_bug_in_the_forms_shared_mask_code_makes_verify_fail(monkeypatch):
    """The issue's experiment: Args.dense_mask's causal branch made lower-right. The matrix form follows it; the
    oracle does not, so the L != S causal cases fail (before, the oracle followed it too and every row passed)."""
    from attnlab.kernels import _check

    monkeypatch.setattr(_check, "causal", masks.causal_lower_right)
    cases = [Case("L<S causal", batch=(1,), H=2, L=9, S=17, is_causal=True),
             Case("L>S causal", batch=(1,), H=2, L=17, S=9, is_causal=True)]
    r = verify.verify({"matrix": attnlab.forms()["matrix"].fn}, cases)
    for row in r.rows:
        print(row.case, row.status, row.worst, row.cross)
    assert [row.status for row in r.rows] == ["fail", "fail"] and all(row.cross.passed for row in r.rows)


def test_a_bug_in_the_oracle_is_an_error_row_never_a_pass(monkeypatch):
    """Break the oracle's causal mask: PyTorch's float64 answer disagrees, every function's row says so, and a
    function that shares the oracle's bug does not pass."""
    real = oracle._visible

    def lower_right(attn_mask, is_causal, N, H, L, S, batch, two_d):
        if is_causal:
            return torch.ones(L, S, dtype=torch.bool).tril(S - L)
        return real(attn_mask, is_causal, N, H, L, S, batch, two_d)

    monkeypatch.setattr(oracle, "_visible", lower_right)

    def same_bug(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        L, S = q.shape[-2], k.shape[-2]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(L, S, dtype=torch.bool).tril(S - L))

    r = verify.verify({"same_bug": same_bug, "sdpa": attnlab.forms()["sdpa"].fn},
                      [Case("L<S causal", batch=(1,), H=2, L=9, S=17, is_causal=True)])
    for row in r.rows:
        print(row.form, row.status, row.detail)
    assert [row.status for row in r.rows] == ["error", "error"] and not r.passed
    assert all(row.detail.startswith("the oracle and PyTorch disagree") for row in r.rows)
