"""The scale a failing output was computed at is measured, and said only where attention at that scale is the output:
a scale slip no cause's words name (``E ** -1/2``, Python's 1/(2E)) gets its number; a wrong formula near no scale
gets none."""

import math

import pytest
import torch

from attnlab.judge import verify
from attnlab.judge.cases import default_cases
from attnlab.judge.probes import fitted

NAMES = {"basic", "causal", "L<S causal upper-left", "head dim 64, causal"}


def _attention(q, k, v, scale, is_causal, attn_mask=None):
    s = q @ k.transpose(-2, -1) * scale
    if is_causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.softmax(s, dim=-1) @ v


def _half_over_e(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    E = query.shape[-1]
    return _attention(query, key, value, E ** -1 / 2, is_causal, attn_mask)  # the learner meant E ** (-1/2)


def _bent(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    s = query.shape[-1] ** -0.5
    out = _attention(query, key, value, s, is_causal, attn_mask)
    return out + 0.2 * torch.sin(3 * out)  # near no scale's attention


def _lines(fn):
    cases = [c for c in default_cases(["float32", "float64"], long=False) if c.name in NAMES]
    assert len(cases) == 2 * len(NAMES)
    r = verify.verify({"f": fn}, cases, timeout=None, check_dropout=False, backward=False)
    for d in r.diagnoses["f"]:
        print(d.key, d.text)
    assert not r.passed
    return r.diagnoses["f"]


@pytest.mark.slow  # verify on several cases and dtypes: over 0.3 s of CPU
def test_a_scale_of_one_over_2e_is_measured_and_said_with_its_number():
    lines = _lines(_half_over_e)
    said = [d for d in lines if d.key == "measured:scores"]
    assert said and lines[0].key == "measured:scores", [d.key for d in lines]
    assert "at scale 1/(2 * E)" in said[0].text, said[0].text
    assert "float64" in said[0].dtypes and not any(d.key == "unclear" for d in lines)


@pytest.mark.slow  # verify on several cases and dtypes: over 0.3 s of CPU
def test_an_output_near_no_scale_gets_no_scale_line():
    lines = _lines(_bent)
    assert not any(d.key == "measured:scores" for d in lines), [d.text for d in lines]


def test_the_forms_read_a_scale_as_a_power_of_e_and_two():
    assert fitted._form(1 / 16, 8)[0] == "1/(2 * E)"
    assert fitted._form(64 ** -0.5, 64)[0] == "1/sqrt(E)"
    assert fitted._form(2 / 40, 40)[0] == "2/E"
    assert fitted._form(0.0371, 40)[0] == ""


def _by_length(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _attention(query, key, value, 1.7 / query.shape[-2], is_causal, attn_mask)  # a scale of no simple form


@pytest.mark.slow
def test_cases_measured_at_different_scales_do_not_share_a_line():
    lines = [d for d in _lines(_by_length) if d.key == "measured:scores"]
    assert lines
    for d in lines:  # each line's number is its own cases': one scale, so cases of one length
        print(d.count, d.text)
    assert len(lines) >= 2, [d.text for d in lines]
