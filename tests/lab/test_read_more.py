"""What the levels read beside a named slip, each failing on the lab before it: a module that takes its softmax in
float32 fails the float64 case (level 3 judged float32 alone, and passed it); an exception the learner's code
raised is a "raises" line beside a slip read from the cases that ran; an lse whose values are a narrower dtype's
than the tensor that holds them is said stored there (the lab said only "your lse is not the log-sum-exp"); and
NaN gradients on the case of scores in the hundreds are said beside another slip that fails the other cases."""

import math

import pytest
import torch

from attnlab.lab import levels
from attnlab.lab.levels import backward, flash, forwards, own, triton
from tests.lab import level_corpus as C
from tests.lab import level_solutions as S


@pytest.mark.slow  # the module judged on its four cases and trained: seconds of CPU
def test_a_module_whose_softmax_is_float32_fails_the_float64_case_as_precision_lost():
    keys, passed = C.own_keys(levels.find("module"), S.causal_self_attention("softmax-float32"), 0)
    print(keys)
    assert not passed and keys[:1] == ["precision-unplaced"], keys
    keys, passed = C.own_keys(levels.find("module"), S.causal_self_attention(None), 0)
    assert passed and keys == []


def test_an_exception_beside_a_slip_is_a_raises_line_of_its_own():
    """The .view raises wherever there are several heads; the one-head case runs, and shows the mask."""
    keys, passed = C.own_keys(levels.find("module"), S.causal_self_attention("peeks-ahead+view"), 0)
    print(keys)
    assert not passed and keys == ["peeks-ahead", "raises"], keys


def test_the_raises_lines_group_what_was_raised_and_leave_the_rest_to_the_cases_that_ran():
    rows = [own.row("f", "a", "float32", [], error="RuntimeError: view size is not compatible (lab.py, line 3)"),
            own.row("f", "b", "float64", [], error="RuntimeError: view size is not compatible (lab.py, line 3)"),
            own.row("f", "c", "float32", [], error="no answer")]
    lines = own.lines([], {}, rows)
    print([(d.key, d.text, d.count, d.dtypes) for d in lines])
    raised = [d for d in lines if d.key == "raises"]
    assert len(raised) == 1 and raised[0].count == 2 and raised[0].dtypes == ["float32", "float64"]
    assert "RuntimeError: view size is not compatible" in raised[0].text
    assert lines[0].key == "unclear" and "1 of 1" in lines[0].text  # (what the case that did not raise shows)


def _lse_reply(level, rounded):
    def lse(q, k, v, case):
        s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
        if case.is_causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
        work = torch.float64 if q.dtype == torch.float64 else torch.float32
        return rounded(torch.logsumexp(s, -1), q.dtype).to(work)
    reply = forwards.lse_values(lse, level.LSE_CASES, 0)
    return reply, forwards.lse_rows(reply, level.LSE_CASES, "f", 0)


def test_an_lse_rounded_to_float32_in_a_float64_call_is_said_stored_there():
    reply, rows = _lse_reply(flash, lambda x, dt: x.float().double() if dt == torch.float64 else x)
    assert any(r.status == "fail" for r in rows)
    assert forwards.lse_stored(reply, flash.LSE_CASES, rows, 0) == ["float32-in-float64"]


def test_an_lse_rounded_to_half_before_its_float32_store_is_said_half():
    reply, rows = _lse_reply(triton, lambda x, dt: x.to(dt).double() if dt in (torch.float16, torch.bfloat16) else x)
    assert any(r.status == "fail" for r in rows)
    assert forwards.lse_stored(reply, triton.LSE_CASES, rows, 0) == ["lse-half"]


def test_an_lse_off_by_a_formula_is_not_said_stored_anywhere():
    """Off by a relative 1e-6 in every dtype: a float64 lse that fails, whose values are no float32's."""
    reply, rows = _lse_reply(flash, lambda x, dt: x * (1 + 1e-6))
    assert any(r.status == "fail" for r in rows)
    assert forwards.lse_stored(reply, flash.LSE_CASES, rows, 0) == []


def test_nan_on_the_large_scores_is_said_beside_another_slip_that_fails_the_other_cases():
    n = len(backward.CASES)
    right = [{q: torch.ones(2, 3, dtype=torch.float64) for q in backward.QUANTITIES} for _ in range(n)]
    wrong = [{q: torch.full((2, 3), 2.0, dtype=torch.float64) for q in backward.QUANTITIES} for _ in range(n)]
    wrong[-1] = {q: torch.full((2, 3), math.nan, dtype=torch.float64) for q in backward.QUANTITIES}
    assert backward._overflowed(wrong, right, [])
    wrong[0] = {q: torch.full((2, 3), math.inf, dtype=torch.float64) for q in backward.QUANTITIES}
    assert not backward._overflowed(wrong, right, [])  # NaN or inf elsewhere too: not the large scores' overflow
