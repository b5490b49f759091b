"""The inference path (issue 42 §4): every judged function is also called under torch.no_grad() and
torch.inference_mode() on inputs that do not require grad. A wrong output there, an input changed in place there
(any argument an API's call builds, too), or an exception there is a line of its own; one bug on both paths is one
line; a right function passes with both outputs held to the output's rule. Each wrong function here passed before
(main never called a function without gradients)."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.judge import verify
from attnlab.judge.cases import default_cases
from tests import api_functions as A
from tests.helpers import named

NAMES = ("basic", "causal", "GQA 6/2 causal", "transposed views, mask bool", "expanded k, v (stride 0 over the batch)")
CASES = [c for c in default_cases(["float32"], long=False) if c.name in NAMES]


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def fast_path_wrong(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """A 'fast path' for inference that forgets the scale."""
    if torch.is_grad_enabled() and q.requires_grad:
        return right(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return right(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)


def scales_k_in_place_when_nothing_needs_it(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                            enable_gqa=False):
    if not k.requires_grad:
        k.mul_(1.0 / k.shape[-1] ** 0.5)  # "saves a multiply": folds the scale into the caller's k
        return right(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)
    return right(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def raises_in_inference_mode(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if torch.is_inference_mode_enabled():
        raise RuntimeError("this kernel has no inference kernel")
    return right(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def unscaled_everywhere(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return right(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)


def keys(result, form):
    return named(result.diagnoses.get(form, []))


def test_a_right_function_passes_with_both_inference_outputs_held_to_the_outputs_rule():
    r = verify.verify({"right": right}, CASES, timeout=None)
    assert r.passed, [(x.case, x.detail) for x in r.rows if x.status != "pass"]
    for row in r.rows:
        got = {c.quantity: c for c in row.comparisons}
        out = got["out"]
        for mode in ("out (no_grad)", "out (inference_mode)"):
            assert got[mode].passed and got[mode].allowed == out.allowed, (row.case, got[mode])


def test_a_wrong_fast_path_without_gradients_fails_with_its_own_lines():
    r = verify.verify({"fast": fast_path_wrong}, CASES, timeout=None)
    assert not r.passed and keys(r, "fast") == ["no-grad-output", "inference-mode-output"], keys(r, "fast")
    row = r.rows[0]
    modes = {c.quantity: c for c in row.comparisons}
    assert modes["out"].passed and not modes["out (no_grad)"].passed, row.comparisons
    assert modes["out (no_grad)"].err > 10 * modes["out (no_grad)"].allowed
    assert "under torch.no_grad() the output is off by" in row.detail, row.detail
    text = r.diagnoses["fast"][0].text
    assert text.startswith("under torch.no_grad() the output differs from the one computed with gradients"), text


def test_an_input_changed_in_place_only_without_gradients_is_named_with_the_mode():
    r = verify.verify({"folds": scales_k_in_place_when_nothing_needs_it}, CASES, timeout=None)
    found = keys(r, "folds")
    assert {"no-grad-in-place", "inference-mode-in-place"} <= set(found), found
    assert "in-place" not in found  # the grad path left it alone: not said of it
    assert "changed its input key in place under torch.no_grad()" in r.rows[0].detail, r.rows[0].detail
    # its outputs are right (the scale is folded, not lost): the lines say the input, not the output
    assert not {"no-grad-output", "inference-mode-output"} & set(found), found


def test_an_exception_only_under_inference_mode_is_its_own_line_and_the_grad_path_is_still_judged():
    r = verify.verify({"raises": raises_in_inference_mode}, CASES[:2], timeout=None)
    assert keys(r, "raises") == ["inference-mode-raises"], keys(r, "raises")
    row = r.rows[0]
    assert row.status == "fail" and "raised RuntimeError under torch.inference_mode(): this kernel" in row.detail
    assert all(c.passed for c in row.comparisons if c.quantity != "out (inference_mode)"), row.comparisons


def test_one_bug_on_both_paths_is_one_line():
    r = verify.verify({"unscaled": unscaled_everywhere}, CASES[:2], timeout=None)
    assert keys(r, "unscaled") == ["unscaled"], keys(r, "unscaled")
    assert not any("no_grad" in x.detail for x in r.rows)


def _flash_changes_k(q, k, v, **kw):
    if not torch.is_grad_enabled():
        k.zero_()
    return A.flash_attn_func(q, k, v, **kw)


def _varlen_changes_lengths(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kw):
    out = A.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **kw)
    if torch.is_inference_mode_enabled():
        cu_seqlens_k.zero_()  # an argument the judge built from the case: its change is seen all the same
    return out


@pytest.mark.parametrize("api, fn, name, line", [
    ("flash-attn", _flash_changes_k, "k", "changed its input k in place under torch.no_grad()"),
    ("flash-attn-varlen", _varlen_changes_lengths, "cu_seqlens_k",
     "changed its input cu_seqlens_k in place under torch.inference_mode()"),
])
def test_every_argument_an_api_call_builds_is_checked(api, fn, name, line):
    from attnlab.judge import apis

    cases = [c for c in apis.cases(api, ["float32"], long=False) if c.name in ("basic", "varlen: 4 sequences 5, 17, "
                                                                                "1, 33")]
    r = verify.verify({"f": apis.Adapted(fn, api)}, cases, timeout=None, check_dropout=False)
    rows = [x for x in r.rows if x.status != "skipped"]
    assert rows and all(line in x.detail for x in rows), [x.detail for x in rows]


@pytest.mark.slow  # a judged process of its own
def test_the_inference_path_runs_where_the_function_is_served_from_its_own_process(tmp_path, monkeypatch):
    from attnlab.judge.apart import isolate

    (tmp_path / "fastpath.py").write_text(
        "import torch\nimport torch.nn.functional as F\n\n\n"
        "def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):\n"
        "    if torch.is_inference_mode_enabled():\n"
        "        v.add_(1.0)\n"
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,\n"
        "                                          enable_gqa=enable_gqa)\n")
    monkeypatch.chdir(tmp_path)
    rows = isolate.verify_elsewhere("fastpath:attention", CASES[:2], timeout=30.0)
    r = verify.VerifyResult.of(rows)
    assert {"inference-mode-in-place", "inference-mode-output"} <= set(keys(r, "fastpath:attention")), r.diagnoses
    assert "no-grad-in-place" not in keys(r, "fastpath:attention")


def test_nan_on_both_paths_in_the_same_rows_is_one_failure_not_two():
    def nan_rows(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v  # NaN on the rows that see no key, with gradients or without

    dead = [c for c in default_cases(["float32"], long=False) if c.name == "fully masked rows"]
    r = verify.verify({"nan": nan_rows}, dead, timeout=None)
    assert keys(r, "nan") == ["dead-rows"], keys(r, "nan")
