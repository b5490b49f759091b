"""`attnlab verify --impl pkg.mod:fn` runs your function in a child process: whatever it does, the exit code is the
verdict's -- never 0 unless every case passed."""

import textwrap
from types import SimpleNamespace

import pytest

from attnlab.cli import main

pytestmark = pytest.mark.slow  # each run starts a child interpreter

# A module that ends the process when imported, an empty --model and a missing device: the table in test_errors.py.

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
    if q.dim() == 3:  # the case with no batch dims
        os._exit(0)
    return good(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)


def hangs(q, k, v, **kw):
    if q.shape[-2] == 17:
        time.sleep(600)
    print("a print from the function")
    return good(q, k, v, **kw)
"""


@pytest.fixture
def verify(tmp_path, monkeypatch, capfd):
    """``verify(spec)``: attnlab verify in this process (its cases in the child), with what the command and the
    child wrote to stdout and stderr."""
    (tmp_path / "myattn.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)  # where the child finds myattn, as `python -m` does

    def run(spec, timeout=60):  # a limit far above a case's time on a busy machine; the hang's test sets 0.5 s
        capfd.readouterr()
        code = main(["verify", "--impl", spec, "--quick", "--dtype", "float32", "--show", "failures", "--timeout",
                     str(timeout), "--only", "basic,no batch dims"])
        r = SimpleNamespace(returncode=code, **capfd.readouterr()._asdict())
        print(spec, r.returncode, r.out[-1500:], r.err[-800:], sep="\n")
        assert "Traceback" not in r.err
        return r

    return run


def test_a_right_function_passes_with_exit_code_0_and_its_prints_stay_off_stdout(verify):
    r = verify("myattn:good")
    assert r.returncode == 0 and "ALL PASS" in r.out


def test_sys_exit_in_the_function_is_an_error_row_and_exit_code_1(verify):
    r = verify("myattn:exits")
    assert r.returncode == 1 and "FAILURES" in r.out and "calls sys.exit" in r.out


def test_os_exit_in_the_function_is_an_error_row_naming_the_case_and_exit_code_1(verify):
    r = verify("myattn:hard_exit")
    assert r.returncode == 1 and "ended the process during case 'no batch dims'" in r.out
    assert "1 passed, 0 failed, 1 errors" in r.out and " skipped" in r.out


def test_a_hang_is_killed_and_is_a_fail_row(verify):
    r = verify("myattn:hangs", timeout=0.5)
    assert r.returncode == 1 and "timed out" in r.out and "a print from the function" in r.err
    assert "a print from the function" not in r.out


STARTS_A_PROCESS = """
import subprocess
import sys

import torch.nn.functional as F

CHILD = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # at import, never waited for


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)
"""


def test_a_process_the_module_starts_is_ended_with_verify_and_said(tmp_path):
    """Before, verify exited 0 and the module's sleeping child ran on."""
    import subprocess
    import sys
    import uuid

    from tests.processes import marked_env, of_run, wait_until_gone

    (tmp_path / "starts.py").write_text(STARTS_A_PROCESS)
    tag = uuid.uuid4().hex
    env = {**marked_env(tag), "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "attnlab", "verify", "--impl", "starts:attention", "--quick", "--only",
                        "basic", "--dtypes", "float32"], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=300)
    print(r.stdout[-1500:], r.stderr)
    assert r.returncode == 0
    assert "--impl starts:attention left processes of its own running" in r.stderr and "they were ended" in r.stderr
    wait_until_gone(of_run(tag), guard_s=30)
    assert of_run(tag) == []
