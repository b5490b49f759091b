"""`attnlab lab check` never exits 0 without a verdict: whatever the learner's code does -- sys.exit, os._exit, a
kill, a crash, a hang, at import or inside the call -- the check ends in a verdict and exit 1, or in one line and exit
2 when the file cannot be loaded. And the file graded is the file as saved, even an edit of the same length in the
same second (the judged process loads it from its source, never from a bytecode cache)."""

import os
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from attnlab.cli import main
from attnlab.lab import grade, judged, levels

pytestmark = pytest.mark.slow  # each check starts the learner's process
QUICK_CASES = len(grade.cases("lab", None, quick=True)[0]) + len(  # what --quick grades a (q, k, v) function on:
    levels.find("loops").module().MORE_CASES)  # the grid's it can answer and the level's own

RIGHT = """
import math

import torch


def mine(q, k, v):
    {before}
    L, S = q.shape[-2], k.shape[-2]
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype)
"""
WAYS_OUT = {  # the first line of the learner's function, and what the check must say of the case it ran
    "sys.exit(0)": ("import sys; sys.exit(0)", "called sys.exit(0) while running the case (exits.py, line 8)"),
    "os._exit(0)": ("import os; os._exit(0)", "the process ended (exit code 0) while running this case"),
    "a kill": ("import os; os.kill(os.getpid(), 9)", "the process ended (signal 9, SIGKILL: out of memory, or killed)"),
    "a segfault": ("import ctypes; ctypes.string_at(0)", "the process ended (signal 11, SIGSEGV: a crash)"),
    "a hang": ("import time; time.sleep(600)", "timed out: no answer after 0.5 s"),
    "an exception": ("raise ValueError('my bug')", "ValueError: my bug (exits.py, line 8)"),
}


@pytest.fixture
def lab_check(tmp_path, monkeypatch, capfd):
    """``lab_check(text)``: attnlab lab check of exits.py:mine in this process (the learner's code in its own)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(grade, "CASE_TIMEOUT", 2.0)  # the hang's limit: 2 s for the basic case's size
    monkeypatch.setattr(judged, "RATE_SECONDS", 2.0)

    def run(text):
        (tmp_path / "exits.py").write_text(text)
        capfd.readouterr()
        code = main(["lab", "check", "exits.py:mine", "--quick", "--out", str(tmp_path / "out")])
        r = SimpleNamespace(returncode=code, **capfd.readouterr()._asdict())
        print(r.returncode, r.out[-2500:], r.err[-1500:], sep="\n")
        assert "Traceback" not in r.err and "Warning" not in r.err
        return r

    return run


@pytest.mark.parametrize("way", WAYS_OUT)
def test_a_way_out_inside_the_call_is_a_verdict_and_exit_1(lab_check, way, monkeypatch):
    line, says = WAYS_OUT[way]
    if way == "a hang":  # what never answers is told so at any limit: waited for 1.5 times it, twice, not 2 s
        monkeypatch.setattr(grade, "CASE_TIMEOUT", 0.5)
        monkeypatch.setattr(judged, "RATE_SECONDS", 0.5)
    r = lab_check(textwrap.dedent(RIGHT).format(before=line))
    assert r.returncode == 1 and says in r.out
    assert "Graded: 0 of" in r.out and ("not measured" in r.out or "skipped: it raised ValueError" in r.out)


@pytest.mark.parametrize(("first", "says"), [
    ("import os\nos._exit(0)", "loading exits.py ended the process (exit code 0) before the function was found"),
    ("import os\nos.kill(os.getpid(), 9)", "ended the process (signal 9, SIGKILL: out of memory, or killed)"),
    ("raise KeyboardInterrupt", "exits.py, line 1: importing it raised KeyboardInterrupt"),
    ("import sys\nsys.exit(0)", "exits.py, line 2: importing it called sys.exit(0)"),
])
def test_a_way_out_at_import_is_one_line_and_exit_2(lab_check, first, says):
    r = lab_check(first + "\n" + textwrap.dedent(RIGHT).format(before="pass"))
    assert r.returncode == 2 and says in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_the_right_function_passes_and_the_check_says_so(lab_check, tmp_path):
    r = lab_check(textwrap.dedent(RIGHT).format(before="pass"))
    assert r.returncode == 0 and f"all {QUICK_CASES} passed" in r.out and "matches" in r.out and "T = 2048" in r.out


def test_an_edit_of_the_same_length_in_the_same_second_is_the_code_graded(tmp_path, monkeypatch):
    """The old file is imported the ordinary way (a bytecode cache written beside it), then edited to a wrong one of
    the same length with the same mtime: the judged process runs the edit."""
    import importlib
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # the ordinary import, as a learner's Python does it
    right = textwrap.dedent(RIGHT).format(before="pass")
    wrong = right.replace(".triu(1)", ".tril(1)")  # the mask turned round: same length
    assert len(wrong) == len(right) and wrong != right
    path = tmp_path / "same.py"
    path.write_text(right)
    st = path.stat()
    importlib.import_module("same")  # writes __pycache__/same.*.pyc, keyed by the mtime (whole seconds) and size
    sys.modules.pop("same")
    assert list((tmp_path / "__pycache__").glob("same.*.pyc"))
    path.write_text(wrong)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    stale = importlib.import_module("same")  # the ordinary import runs the old code
    q = torch.randn(1, 2, 6, 8)
    want = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert torch.allclose(stale.mine(q, q, q), want, atol=1e-6)
    with judged.open_learner("same.py:mine") as learner:
        got = learner.fn.call(q, q, q, None, grade.MATCH_CASE)
    print(f"the edit graded: {int(got.isnan().any(-1).sum())} of 6 rows NaN, the rest off by "
          f"{(got - want).nan_to_num().abs().max():.3f}")
    assert not torch.allclose(got, want, atol=1e-3)  # the wrong edit, as saved (its mask hides most keys)
    assert len(list((tmp_path / "__pycache__").glob("*.pyc"))) == 1  # and it wrote no bytecode of its own


LEAVES_ITS_SESSION = """
import os
import time

if os.fork() == 0:  # a child that leaves the judged process's session and group, as a daemon does
    os.setsid()
    with open({pid!r}, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
    os._exit(0)
"""


def test_a_process_the_learners_code_moved_to_a_session_of_its_own_is_ended_with_the_check(tmp_path):
    """The process group's kill missed it: it ran on (`python -m attnlab.lab.judged`) after the check exited 0."""
    from tests.processes import alive

    path, pid_file = tmp_path / "sessions.py", tmp_path / "child.pid"
    path.write_text(LEAVES_ITS_SESSION.format(pid=str(pid_file)) + textwrap.dedent(RIGHT).format(before="pass"))
    with judged.open_learner(f"{path}:mine") as learner:
        for _ in range(3000):  # (a guard against a hang, not a speed)
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.01)
        pid = int(pid_file.read_text())
        assert alive(pid) and os.getsid(pid) == pid != learner.fn.process.pid
    assert not alive(pid) and learner.fn.strays
