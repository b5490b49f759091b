"""attnlab.testing: verify as pytest assertions. It fails a wrong function with the table and the diagnosis, passes a
right one, and the example file a kernel author copies runs as it is."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch.nn.functional as F

import attnlab
import attnlab.testing

ROOT = Path(__file__).resolve().parents[1]


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def gqa_with_repeat(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale)


@pytest.mark.slow  # over 2 s: the whole quick grid, judged twice
def test_a_wrong_function_raises_with_the_failing_rows_and_the_cause():
    with pytest.raises(AssertionError) as e:
        attnlab.testing.assert_attention_matches(gqa_with_repeat, dtypes=["float32"])
    text = str(e.value)
    print(text)
    assert "GQA 6/2 causal" in text and "FAIL" in text and "basic" not in text.split("\n", 3)[3]
    assert ("only GQA cases fail; yours gives query head h key head h % Hkv (repeat): query head h must use key head "
            "h // (H / Hkv)") in text
    assert "[green]" not in text and "\x1b" not in text  # plain text, for any terminal or CI log


@pytest.mark.slow  # over 2 s: the float64 quick grid
def test_a_right_function_passes_and_cases_have_readable_ids():
    attnlab.testing.assert_attention_matches(right, dtypes=["float64"])
    params = [p for p in attnlab.testing.cases(dtypes=["float32"], only="GQA") if p.values[0].mod is None]
    assert len(params) >= 3 and all("GQA" in p.id and p.id.endswith("[float32]") for p in params)
    for p in params:
        attnlab.testing.assert_case(right, p.values[0])
    with pytest.raises(AssertionError, match="only GQA cases fail|GQA"):
        attnlab.testing.assert_case(gqa_with_repeat, params[0].values[0])


@pytest.mark.slow(first="the judging process assert_case starts, kept for the tests after it")  # 2 s when it starts it
def test_a_function_that_calls_sys_exit_fails_its_case_and_the_test_goes_on():
    """sys.exit(0) inside the function is an error row naming it, never an exit code 0 for the suite."""

    def exits(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        sys.exit(0)

    basic = next(p.values[0] for p in attnlab.testing.cases(dtypes=["float32"], only="basic"))
    with pytest.raises(AssertionError) as e:
        attnlab.testing.assert_case(exits, basic)
    print(e.value)
    assert "ERROR" in str(e.value) and "called sys.exit(0) while running the case" in str(e.value)


@pytest.mark.slow
def test_a_case_the_function_cannot_take_is_skipped_not_failed():
    mod = next(p.values[0] for p in attnlab.testing.cases(dtypes=["float32"]) if p.values[0].mod)
    with pytest.raises(pytest.skip.Exception, match="takes no score_mod"):
        attnlab.testing.assert_case(right, mod)


@pytest.mark.long  # 40 s on 2 cores: pytest started afresh, and a judge and a judged process per test of the file
@pytest.mark.slow
def test_the_example_file_passes_as_it_is():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "examples")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(r.stdout[-2000:], r.stderr[-2000:])
    assert r.returncode == 0 and " passed" in r.stdout and "failed" not in r.stdout


@pytest.mark.slow(first="the judge's process, started for its three cases")
def test_name_backward_and_factor_reach_the_judge_and_the_ids():
    params = attnlab.testing.cases(dtypes=["float32"], only="basic", name="mine")
    assert params and all(p.id.startswith("mine: basic") for p in params)
    basic = params[0].values[0]

    def no_backward(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return right(q.detach(), k.detach(), v.detach(), attn_mask, dropout_p, is_causal, scale, enable_gqa)

    attnlab.testing.assert_case(no_backward, basic, backward=False)  # judged on its forward: passes
    with pytest.raises(AssertionError) as e:  # with its gradients asked for, it fails
        attnlab.testing.assert_case(no_backward, basic, name="mine")
    assert "mine" in str(e.value) and "FAIL" in str(e.value)

    def unscaled(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return right(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)

    with pytest.raises(AssertionError) as e:  # a wrong forward fails forward-only, at a wider factor too
        attnlab.testing.assert_case(unscaled, basic, backward=False, factor=4.0)
    assert "factor set to 4x" in str(e.value) and "the output only" in str(e.value)


@pytest.mark.parametrize("factor", [0, -1, 0.5, float("nan"), float("inf")])
def test_a_factor_below_one_is_refused_as_on_the_command_line(factor):
    with pytest.raises(ValueError, match=r"factor=.*give a number >= 1"):
        attnlab.testing.assert_attention_matches(right, dtypes=["float32"], factor=factor)


def refuses_everything(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    raise attnlab.Unsupported("this kernel takes nothing")


@pytest.mark.slow  # the whole float32 quick grid, refused case by case
def test_a_function_that_refuses_every_case_fails_as_verify_does():
    """Before: "1 passed" under pytest where `attnlab verify` exits 1."""
    with pytest.raises(AssertionError) as e:
        attnlab.testing.assert_attention_matches(refuses_everything, dtypes=["float32"])
    print(e.value)
    assert "no case passed: refuses_everything was judged on nothing" in str(e.value)
    assert "this kernel takes nothing" in str(e.value)


FAILING_TEST = '''import torch.nn.functional as F
import pytest
import attnlab.testing


def unscaled(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=1.0,
                                          enable_gqa=enable_gqa)


@pytest.mark.parametrize("case", attnlab.testing.cases(["bfloat16"], only="basic"))
def test_one_case(case):
    attnlab.testing.assert_case(unscaled, case)
'''


@pytest.mark.slow  # pytest in a process of its own, a judge and a judged process for it
def test_a_failure_under_pytest_shows_the_table_and_the_lines_and_no_frame_of_attnlabs(tmp_path):
    (tmp_path / "test_theirs.py").write_text(FAILING_TEST)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        str(tmp_path / "test_theirs.py")], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    text = r.stdout + r.stderr
    print(text)
    assert r.returncode == 1 and "1 failed" in text
    assert "unscaled  basic  bfloat16" in text and "FAIL" in text  # the table
    assert "the output is attention without the scale" in text  # the line
    assert "attnlab/" not in text and "isolate.py" not in text and "picked=" not in text  # no internal frame
    shown = [line for line in text.splitlines() if line.startswith("case = ")]
    assert shown == ["case = Case('basic', dtype='bfloat16')"], shown  # the parameter in a few words
