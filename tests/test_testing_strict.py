"""attnlab.testing as strict as `attnlab verify` (issue 45): a kernel that exits, kills its process or hangs fails
its test and the run goes on, through real pytest runs; every bad argument is a TypeError / ValueError naming it,
raised before any judge starts; selecting nothing is an error, not a pass."""

import subprocess
import sys
import textwrap
import uuid

import pytest
import torch
import torch.nn.functional as F

import attnlab.testing
from attnlab.testing import NoDevice
from tests.processes import marked_env, of_run, wait_until_gone


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


BASIC = next(p.values[0] for p in attnlab.testing.cases(dtypes=["float32"], only="basic"))

# Kernels that end or stall their process, at module level (loaded in a process of their own from their pickle) and
# inside the test (served from a fork of pytest's process); each judged on one case.
SUITE = '''
import os, sys, time
import torch.nn.functional as F
import attnlab.testing

CASE = next(p.values[0] for p in attnlab.testing.cases(dtypes=["float32"], only="basic"))


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def hard_exit(q, k, v, **kw):
    os._exit(0)


def soft_exit(q, k, v, **kw):
    sys.exit(0)


def kills_itself(q, k, v, **kw):
    os.kill(os.getpid(), 9)


def hangs(q, k, v, **kw):
    time.sleep(600)


def test_os_exit():
    attnlab.testing.assert_case(hard_exit, CASE)


def test_sys_exit():
    attnlab.testing.assert_case(soft_exit, CASE)


def test_kill_9():
    attnlab.testing.assert_case(kills_itself, CASE)


def test_hang():
    attnlab.testing.assert_case(hangs, CASE, timeout=1)


def test_os_exit_inside_the_test():
    def inner(q, k, v, **kw):
        os._exit(0)
    attnlab.testing.assert_case(inner, CASE)


def test_kill_9_inside_the_test():
    attnlab.testing.assert_case(lambda q, k, v, **kw: os.kill(os.getpid(), 9), CASE)


def test_hang_inside_the_test():
    def inner(q, k, v, **kw):
        time.sleep(600)
    attnlab.testing.assert_case(inner, CASE, timeout=1)


def test_right_after_them():
    attnlab.testing.assert_case(right, CASE)
'''
BAD = ["test_os_exit", "test_sys_exit", "test_kill_9", "test_hang", "test_os_exit_inside_the_test",
       "test_kill_9_inside_the_test", "test_hang_inside_the_test"]
SAYS = {"test_os_exit": "the process ended (exit code 0)", "test_sys_exit": "called sys.exit(0)",
        "test_kill_9": "signal 9", "test_hang": "timed out", "test_os_exit_inside_the_test": "(exit code 0)",
        "test_kill_9_inside_the_test": "signal 9", "test_hang_inside_the_test": "timed out"}


def _pytest(tmp_path, *args):
    (tmp_path / "test_kernels_that_end.py").write_text(SUITE)
    tag = uuid.uuid4().hex
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *args,
                        "test_kernels_that_end.py"], capture_output=True, text=True, cwd=tmp_path,
                       env=marked_env(tag), timeout=600)
    print(r.stdout[-6000:], r.stderr[-2000:])
    wait_until_gone(of_run(tag), guard_s=30)
    assert of_run(tag) == []  # no judge, worker or fork left running
    return r


# a pytest run of eight kernels, seven of which end their judge; each ending is a verify row in make test
# (tests/cli/test_errors.py, test_verify_rule)
@pytest.mark.long
@pytest.mark.slow
def test_a_kernel_that_exits_kills_itself_or_hangs_fails_its_test_and_the_run_goes_on(tmp_path):
    r = _pytest(tmp_path)
    assert r.returncode == 1
    assert "7 failed, 1 passed" in r.stdout
    for name in BAD:
        line = next(x for x in r.stdout.splitlines() if x.startswith(f"FAILED test_kernels_that_end.py::{name} "))
        assert line, name
    for name, says in SAYS.items():
        section = r.stdout.split(f"_ {name} _", 1)[1].split("\n_", 1)[0]
        assert says in section, (name, says)


@pytest.mark.long
@pytest.mark.slow
def test_the_same_under_x_and_two_xdist_workers(tmp_path):
    r = _pytest(tmp_path, "-x")
    assert r.returncode == 1 and "1 failed" in r.stdout and "FAILED test_kernels_that_end.py::test_os_exit" in r.stdout
    r = _pytest(tmp_path, "-n", "2")
    assert r.returncode == 1 and "7 failed, 1 passed" in r.stdout


BAD_ARGUMENTS = [
    ({"dtypes": ["float8"]}, ValueError, r"dtypes=\['float8'\]: 'float8' is not a dtype the judge checks"),
    ({"dtypes": ["float32", "nope"]}, ValueError, "'nope' is not a dtype the judge checks; choose from float32"),
    ({"dtypes": "float32"}, TypeError, "dtypes='float32': give a list of dtypes"),
    ({"dtypes": []}, ValueError, r"dtypes=\[\] selects no dtype, so nothing would be judged"),
    ({"device": "nosuch"}, ValueError, "device='nosuch' is not a torch device"),
    ({"device": "meta"}, NoDevice, "device='meta': meta tensors hold shapes without numbers"),
    ({"device": ""}, ValueError, "device='' is not a torch device"),
    ({"device": 0}, TypeError, "device=0: give a device as a string"),
    ({"device": "cpu:1"}, NoDevice, "device='cpu:1': no such device here"),
    ({"seed": "0"}, TypeError, "seed='0': give an integer seed from 0 to 4294967295"),
    ({"seed": 2**70}, ValueError, "seed=1180591620717411303424: give a seed from 0 to 4294967295"),
    ({"seed": -1}, ValueError, "seed=-1: give a seed from 0 to"),
    ({"timeout": 0}, ValueError, "timeout=0: give a positive number of seconds, at most 86400 "),
    ({"timeout": 1e12}, ValueError, "timeout=1000000000000.0: give a positive number of seconds, at most 86400 "),
    ({"timeout": -1}, ValueError, "timeout=-1: give a positive"),
    ({"timeout": float("nan")}, ValueError, "timeout=nan: give a positive"),
    ({"timeout": None}, TypeError, "timeout=None: give a positive"),
    ({"factor": 0}, ValueError, "factor=0: give a number >= 1"),
    ({"api": "nope"}, ValueError, "api='nope': choose from 'sdpa'"),
    ({"backward": "no"}, TypeError, "backward='no': give True or False"),
]


@pytest.mark.parametrize("kw, error, says", BAD_ARGUMENTS, ids=[repr(k) for k, _, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_refused_before_any_judge_starts(kw, error, says, monkeypatch):
    from attnlab.judge.apart import isolate

    monkeypatch.setattr(isolate, "judge_apart", lambda *a, **k: pytest.fail("a judge was started"))
    with pytest.raises(error, match=says) as e:
        attnlab.testing.assert_attention_matches(right, **kw)
    print(e.value)
    if "dtypes" not in kw and "api" not in kw:  # assert_case takes the same arguments, by the same rules
        with pytest.raises(error, match=says):
            attnlab.testing.assert_case(right, BASIC, **kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_a_gpu_that_is_not_here_says_so():
    for device in ("cuda", "cuda:7", torch.device("cuda")):
        with pytest.raises(NoDevice, match="no such device here"):
            attnlab.testing.assert_attention_matches(right, device=device)


def test_dtypes_and_devices_as_torch_objects_are_taken(monkeypatch):
    from attnlab.judge.apart import isolate

    seen = {}

    def judge_apart(fn, name, cases, **kw):
        seen.update(kw, dtypes={c.dtype for c in cases})
        raise RuntimeError("stop here")

    monkeypatch.setattr(isolate, "judge_apart", judge_apart)
    with pytest.raises(RuntimeError, match="stop here"):
        attnlab.testing.assert_attention_matches(right, dtypes=[torch.float32, "bfloat16"],
                                                 device=torch.device("cpu"))
    assert seen["dtypes"] == {"float32", "bfloat16"} and seen["device"] == "cpu" and seen["timeout"] == 10.0


@pytest.mark.parametrize("fn, says", [(3, "fn=3: not a function"), (None, "fn=None: not a function"),
                                      ("matrix", r"fn='matrix': a string, not a function.*kernels.get\('matrix'\)"),
                                      (torch.Tensor, r"fn=torch\.Tensor: a class, not a function \(calling it makes a "
                                                     r"Tensor\); give the attention function")])
def test_what_is_not_a_function_is_refused_as_such(fn, says):
    with pytest.raises(TypeError, match=says):
        attnlab.testing.assert_attention_matches(fn)
    with pytest.raises(TypeError, match=says):
        attnlab.testing.assert_case(fn, BASIC)


@pytest.mark.parametrize("case, says", [("causal", "case='causal': give one Case of attnlab.testing.cases()"),
                                        (None, "case=None: give one Case"),
                                        (pytest.param(BASIC), "not the pytest.param")])
def test_what_is_not_a_case_is_refused_as_such(case, says):
    with pytest.raises(TypeError, match=says):
        attnlab.testing.assert_case(right, case)


@pytest.mark.parametrize("kw, error, says", [
    ({"only": 3}, TypeError, "only=3: give a word or a list of words"),
    ({"only": "nomatchatall"}, ValueError, "only='nomatchatall' matches no case, so nothing would be judged"),
    ({"only": ["GQAA"]}, ValueError, r"only=\['GQAA'\] matches no case"),
    ({"only": []}, ValueError, "only=\\[\\]: give one or more non-empty words"),
    ({"dtypes": ["nope"]}, ValueError, "'nope' is not a dtype the judge checks"),
    ({"dtypes": []}, ValueError, "selects no dtype"),
])
def test_cases_that_select_nothing_are_an_error(kw, error, says):
    with pytest.raises(error, match=says):
        attnlab.testing.cases(**kw)


@pytest.mark.slow
def test_a_parametrized_test_over_no_case_is_a_collection_error_not_a_pass(tmp_path):
    (tmp_path / "test_none.py").write_text(textwrap.dedent('''
        import pytest
        import attnlab.testing

        @pytest.mark.parametrize("case", attnlab.testing.cases(only=["GQAA"]))
        def test_case(case):
            pass
    '''))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_none.py"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    print(r.stdout[-3000:])
    assert r.returncode != 0 and "matches no case" in r.stdout and "1 error" in r.stdout


JUDGES_AT_IMPORT = '''
import torch.nn.functional as F
import attnlab.testing


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


attnlab.testing.assert_case(right, next(p.values[0] for p in attnlab.testing.cases(dtypes=["float32"], only="basic")))
print("judged")
'''


@pytest.mark.slow(first="the judge's process, which a worker keeps for the next test that judges")
def test_a_module_that_judges_at_import_is_judged_once_not_again_in_the_judged_process(tmp_path):
    """The judged process imports the function's module to load it; a call there would start a judge, whose worker
    imports the module again, each waiting on the next until the loading's limit (120 s). It is refused there, and
    the function is served from a fork of the caller instead: the import judges once, in seconds."""
    (tmp_path / "judges_at_import.py").write_text(JUDGES_AT_IMPORT)
    tag = uuid.uuid4().hex
    r = subprocess.run([sys.executable, "-c", "import judges_at_import"], capture_output=True, text=True,
                       cwd=tmp_path, env=marked_env(tag), timeout=100)
    print(r.returncode, r.stdout, r.stderr[-2000:])
    assert r.returncode == 0 and r.stdout.count("judged") == 1
    wait_until_gone(of_run(tag), guard_s=30)
    assert of_run(tag) == []
