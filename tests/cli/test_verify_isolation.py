"""`attnlab verify --impl pkg.mod:fn` runs your function in a child process: whatever it does, the exit code is the
verdict's -- never 0 unless every case passed."""

import textwrap

import pytest

pytestmark = pytest.mark.slow  # each run starts a child interpreter

MODULE = """
import os
import sys
import time

import torch.nn.functional as F


def good(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def exits(q, k, v, **kw):
    sys.exit(0)


def hard_exit(q, k, v, attn_mask=None, is_causal=False, **kw):
    if is_causal:
        os._exit(0)
    return good(q, k, v, attn_mask=attn_mask, **kw)


def hangs(q, k, v, **kw):
    if q.shape[-2] == 17:
        time.sleep(600)
    print("a print from the function")
    return good(q, k, v, **kw)
"""


@pytest.fixture
def verify(run_cli, tmp_path):
    (tmp_path / "myattn.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "dies.py").write_text("import os\nos._exit(0)\n")
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(0)\n")

    def run(spec, *more):
        r = run_cli("verify", "--impl", spec, "--quick", "--dtype", "float32", "--show", "failures", "--timeout", "2",
                    "--only", "basic,causal,no batch dims", *more)
        print(spec, r.returncode, r.stdout[-1500:], r.stderr[-800:], sep="\n")
        assert "Traceback" not in r.stderr
        return r

    return run


def test_a_right_function_passes_with_exit_code_0_and_its_prints_stay_off_stdout(verify):
    r = verify("myattn:good")
    assert r.returncode == 0 and "ALL PASS" in r.stdout


def test_sys_exit_in_the_function_is_an_error_row_and_exit_code_1(verify):
    r = verify("myattn:exits")
    assert r.returncode == 1 and "FAILURES" in r.stdout and "calls sys.exit" in r.stdout


def test_os_exit_in_the_function_is_an_error_row_naming_the_case_and_exit_code_1(verify):
    r = verify("myattn:hard_exit")
    assert r.returncode == 1 and "ended the process during case 'causal'" in r.stdout
    assert "1 passed, 0 failed, 1 errors" in r.stdout and " skipped" in r.stdout


def test_a_hang_is_killed_and_is_a_fail_row(verify):
    r = verify("myattn:hangs")
    assert r.returncode == 1 and "timed out" in r.stdout and "a print from the function" in r.stderr
    assert "a print from the function" not in r.stdout


@pytest.mark.parametrize("spec, words", [("dies:f", "ended the process (exit code 0)"),
                                         ("quits:f", "called sys.exit(0) when imported")])
def test_a_module_that_ends_the_process_at_import_is_one_line_exit_2(verify, spec, words):
    r = verify(spec)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr


def test_an_empty_model_name_and_a_missing_device_are_one_line_exit_2(run_cli):
    for args, words in ((["--model", ""], "--model needs a Hugging Face hub name"),
                        (["--device", "cuda", "--impl", "matrix"], "--device cuda: no such device here"),
                        (["--device", "nonsense"], "is not a torch device"),
                        (["--only", "no such case"], "matches no case")):
        r = run_cli("verify", *args)
        print(args, r.returncode, r.stderr)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1
