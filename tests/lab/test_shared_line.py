"""Where no slip is the learner's, the level still says what the failing cases share -- how many fail, in which
dtypes, which quantities fail and which are right -- and where that is a rounding's size, right in another dtype,
that it is precision lost (levels 3, 5 and 6, which judge their own cases)."""

import pytest
import torch

from tests.lab import blind_measure
from tests.lab import level_solutions as S


def _lines(fn):
    from attnlab.lab import levels

    level = levels.find("backward")
    found, passed = blind_measure._own(level, fn, 0)
    for d in found:
        print(d.key, d.text)
    assert not passed
    return found


def _dq_bent(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    dq, dk, dv = S.flash_backward(q, k, v, out, lse, dout, is_causal, block_q, block_k)
    return dq + 0.1 * torch.sin(7 * dq), dk, dv  # wrong in no way a slip is


def _float64_in_float32(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    dq, dk, dv = S.flash_backward(*(t.float() for t in (q, k, v, out, lse, dout)), is_causal, block_q, block_k)
    return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype)


@pytest.mark.slow  # a level's 24 cases, twice
def test_a_backward_no_slip_explains_says_which_quantities_fail_and_which_are_right():
    found = _lines(_dq_bent)
    assert [d.key for d in found] == ["unclear"], found
    text = found[0].text
    assert "failing: dq" in text and "right in every case: dk, dv" in text and "of 25 cases fail" in text, text


@pytest.mark.slow
def test_a_backward_computed_in_float32_for_float64_is_precision_lost_not_placed():
    found = _lines(_float64_in_float32)
    assert [d.key for d in found] == ["precision-unplaced"], found
    assert "float64: " in found[0].text and "every case in float32 passes" in found[0].text, found[0].text


def _raises_on_causal(q, k, v, out, lse, dout, is_causal=False, block_q=64, block_k=64):
    if is_causal:
        raise NotImplementedError("causal")
    return S.flash_backward(q, k, v, out, lse, dout, is_causal, block_q, block_k)


@pytest.mark.slow
def test_the_shared_line_claims_no_quantity_right_where_a_case_compared_nothing():
    found = _lines(_raises_on_causal)
    assert all("right in every case" not in d.text for d in found), [d.text for d in found]


def _lse_bent(q, k, v, is_causal=False, block_q=64, block_k=64):
    out, lse = S.flash_forward(q, k, v, is_causal, block_q, block_k)
    return out, lse + 0.05 * torch.sin(13.0 * lse.float()).to(lse.dtype)  # wrong in no way a slip is


@pytest.mark.slow
def test_a_flash_forward_whose_lse_alone_fails_gets_a_line_from_the_levels_own_rows():
    """Level 4's lse is judged on the level's own rows, added after verify's; their failure is read too."""
    from attnlab.lab import levels

    found, passed = blind_measure._attention(levels.find("flash"), _lse_bent, "flash_forward", 0)
    print([(d.key, d.text) for d in found])
    assert not passed and found and found[0].key == "lse-only", [d.key for d in found]
