"""Hold your attention kernel to attnlab's float64 oracle in your own test suite: copy this file.

Replace ``my_attention`` with your function (it takes ``F.scaled_dot_product_attention``'s arguments)
and ``DEVICE`` with where it runs. Each check compares the output and the gradients dq, dk, dv with
a float64 oracle: a case passes when ``max|yours - oracle| <= 2 x max|PyTorch - oracle| + floor``,
PyTorch running on the same device in the same dtype. A failure's message is the table of failing
cases and what they point to, e.g. "only GQA cases fail: query head h uses key head h // (H / Hkv)".

    pytest examples/test_my_attention.py -q
"""

import pytest
import torch.nn.functional as F

import attnlab.testing

DEVICE = "cpu"  # "cuda" for a GPU kernel


def my_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Your kernel here; PyTorch's own stands in for it."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def test_my_attention_on_the_quick_grid():
    """Every case of the quick grid in float32, one test (about 10 s on a CPU)."""
    attnlab.testing.assert_attention_matches(my_attention, device=DEVICE, dtypes=["float32"])


@pytest.mark.parametrize("case", attnlab.testing.cases(dtypes=["bfloat16"], only=["causal", "GQA", "mask"]))
def test_my_attention_case_by_case(case):
    """One test per case, named by the case: '-k GQA' reruns the GQA ones."""
    attnlab.testing.assert_case(my_attention, case, device=DEVICE)
