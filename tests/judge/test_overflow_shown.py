""""Large scores overflow" is said only where the scores are large: a softmax over another dim that meets a column
of -inf gives NaN on small scores too, and is not told as a missing max subtraction."""

import math

import pytest
import torch

from attnlab.judge import verify
from attnlab.judge.cases import default_cases
from tests.helpers import named


def _softmax_over_dim_1(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
    """A learner's softmax with no dim: PyTorch's implicit choice takes dim 1 of a 4-D tensor (the heads)."""
    s = query @ key.transpose(-2, -1) * (query.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask
    return torch.softmax(s, dim=1) @ value


@pytest.mark.slow  # verify on several cases and dtypes: over 0.3 s of CPU
def test_nan_on_small_scores_too_is_not_told_as_overflow():
    names = {"basic", "causal", "large logits", "large logits, causal, L=97", "bool mask", "L=1"}
    cases = [c for c in default_cases(["float32", "float64"], long=False) if c.name in names]
    assert any(c.magnitude > 1 for c in cases) and any(c.is_causal and c.magnitude <= 1 for c in cases)
    r = verify.verify({"f": _softmax_over_dim_1}, cases, timeout=None, check_dropout=False, backward=False)
    lines = r.diagnoses["f"]
    for d in lines:
        print(d.key, d.text)
    assert not r.passed
    assert "max-subtraction" not in named(lines), named(lines)
