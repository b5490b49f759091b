"""Rows a reading leaves with no key say nothing of the reading by themselves (attnlab.judge.explain's only_empty):
on a case where a reading is met only on such rows, it joins the line other cases name by their numbers, and names
nothing alone. The varlen side (a kernel that stops at an empty sequence): tests/judge/test_kv_bugs.py."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.judge import cases as C
from attnlab.judge import diagnose, verify


def inverted(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA with a bool mask read backwards (True: the key is hidden)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@pytest.mark.slow
def test_an_inverted_mask_keeps_its_one_line_where_a_case_is_met_only_on_empty_rows():
    """At L = 1 under a lower-right mask the query sees every key, so the inverted mask leaves its row with none:
    the reading is met there only on an empty row. That case joins "the bool mask is read backwards", which the
    other bool-mask cases name by their numbers -- no line of its own ("only the lower-right masks fail", or "no single
    pattern" for a case nothing explains)."""
    grid = [c for c in C.default_cases(["float32"], long=False) if c.mask in ("bool", "lower-right", "padding")
            and c.dropout_p == 0]
    assert any(c.L == 1 and c.mask == "lower-right" for c in grid)
    r = verify.verify({"inverted": inverted}, grid, check_dropout=False, timeout=None, backward=False)
    keys = [d.key for d in diagnose.diagnose(r, "inverted")]
    print(keys)
    assert not r.passed and keys == ["mask-inverted"], keys  # (not "unclear" for the L = 1 case, nor a line of its own)
    decode = [row for row in r.rows if row.case.startswith("L=1 decode lower-right")]
    assert decode and all(row.status == "fail" for row in decode)
