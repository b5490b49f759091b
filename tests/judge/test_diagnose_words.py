"""The words of a failing row and of its cause say what the function did: what it returns in the rows that see
no key (NaN, the mean of V), and, where nothing could be measured, the limit the rule computed (never "allowed 0")."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.judge import verify
from attnlab.report.exercise import _fail_line
from tests import mutants


def _dead_cases():
    return [c for c in verify.default_cases(["float32"], long=False) if "dead-rows" in c.tags]


@pytest.mark.parametrize(("name", "returned"), [("plain softmax: NaN on dead rows", "yours returns NaN"),
                                                ("-1e9 for -inf: dead rows spread evenly", "the mean of V")])
def test_the_dead_rows_line_says_what_the_function_returns_there(name, returned):
    cases = _dead_cases()
    assert len(cases) >= 2, [c.name for c in cases]
    r = verify.verify({name: mutants.MUTANTS[name][0]}, cases, timeout=None)
    lines = {d.key: d.text for d in r.diagnoses[name]}
    print(lines)
    assert "dead-rows" in lines and returned in lines["dead-rows"] and "not NaN" not in lines["dead-rows"], lines


def _detached(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                          enable_gqa=enable_gqa).detach()


def test_a_gradient_that_never_came_back_is_held_to_the_rules_limit_not_to_zero():
    cases = [c for c in verify.default_cases(["float32"], long=False) if c.name == "basic"]
    r = verify.verify({"detached": _detached}, cases, timeout=None)
    (row,) = r.rows
    grads = [c for c in row.comparisons if c.quantity in ("dq", "dk", "dv")]
    print([(c.quantity, c.err, c.torch_err, c.allowed) for c in grads])
    assert row.status == "fail" and len(grads) == 3
    assert all(c.err == float("inf") and c.allowed > 0 and c.torch_err > 0 and not c.passed for c in grads), grads
    line = _fail_line(row)
    print(line)
    assert "no gradient reaches q" in line and "allowed 0.00e+00" not in line and " is inf " not in line, line
    assert torch.isfinite(torch.tensor(row.worst.allowed))
