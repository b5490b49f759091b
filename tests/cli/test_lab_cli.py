"""`attnlab lab`: start writes the learner's file once; check grades it, says the likely cause in words, measures it
and writes JSON the lesson reads; a file that cannot be checked is one line, exit 2."""

import json

import pytest

from attnlab.lab import grade, levels
from attnlab.lab.result import LabResult

QUICK_CASES = len(grade.cases("lab", None, quick=True)[0]) + len(  # what --quick grades a (q, k, v) function on:
    levels.find("loops").module().MORE_CASES)  # the grid's it can answer and the level's own

SCALED = "scores = (q @ k.transpose(-2, -1)) / math.sqrt(E)"
UNSCALED = "scores = q @ k.transpose(-2, -1)"
MATRIX = """
def attention_matrix(q, k, v):  # the learner's four lines, level 2
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    {scores}
    future = torch.ones(L, S, dtype=torch.bool).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return (weights @ v).to(dtype)
"""


# two full `lab check`s through the console script (25 s idle, 50 s in a busy suite): make test-long. make test keeps
# a right check through it (tests/cli/test_lab_exits.py) and the same grading and measuring in-process
# (tests/lab/test_exercise.py)
@pytest.mark.long
@pytest.mark.slow
def test_start_then_check_a_wrong_and_a_right_function(run_cli, tmp_path, round_trip):
    r = run_cli("lab", "start", "mylab")
    assert r.returncode == 0 and "wrote mylab/attention_lab.py" in r.stdout and "attnlab lab check" in r.stdout
    r = run_cli("lab", "start", "mylab", "--level", "matrix")
    assert r.returncode == 0 and "wrote mylab/lab_matrix.py: level 2" in r.stdout
    lab = tmp_path / "mylab" / "lab_matrix.py"
    starter = lab.read_text()
    head = starter[:starter.index("def attention_matrix")]
    lab.write_text(head + MATRIX.format(scores=UNSCALED))  # the learner's first try: unscaled
    again = run_cli("lab", "start", "mylab", "--level", "matrix")
    assert again.returncode == 0 and "already there" in again.stdout and UNSCALED in lab.read_text()
    wrong = run_cli("lab", "check", "mylab/lab_matrix.py", "--quick", timeout=600)
    print(wrong.stdout[-3000:])
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert "found attention_matrix in mylab/lab_matrix.py: the lab's form, (q, k, v), always causal" in wrong.stdout
    assert "failed" in wrong.stdout and "your scores are not scaled: divide each q·k by √d" in wrong.stdout
    assert "does not match" in wrong.stdout and "as it came" not in wrong.stdout  # edited: the learner's own
    lab.write_text(head + MATRIX.format(scores=SCALED))
    right = run_cli("lab", "check", "mylab/lab_matrix.py:attention_matrix", "--quick", timeout=600)
    print(right.stdout[-3000:])
    assert right.returncode == 0, right.stdout[-2000:] + right.stderr
    assert f"all {QUICK_CASES} passed" in right.stdout and "matches" in right.stdout and "T = 2048" in right.stdout
    assert "level 3" in right.stdout and "--level module" in right.stdout  # the next level, by its command
    saved = sorted((tmp_path / "attnlab-out" / "lab-checks").glob("lab_matrix-attention_matrix-*.json"))
    assert len(saved) == 2 and f"wrote attnlab-out/lab-checks/{saved[1].name}" in right.stdout  # both checks kept
    data = json.loads(saved[1].read_text())
    result = round_trip(data, LabResult)
    assert result.passed and result.form == "lab" and result.match_err < 1e-6 and result.diagnoses == []
    assert not result.given and result.level == "matrix"
    assert [t.seq for t in result.timings] == [128, 512, 2048] and abs(result.exponents["memory"] - 2) < 0.25
    assert saved[1].with_suffix(".png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize(("args", "says"), [
    (("lab", "check", "nothere.py"), "nothere.py: no such file"),
    (("lab", "check", "bad.py"), "bad.py, line 1: syntax error"),
    (("lab", "check", "bad.py:other"), "bad.py, line 1: syntax error"),
    (("lab", "check", "two.py"), "takes neither (q, k, v) nor F.scaled_dot_product_attention's arguments"),
    (("lab",), "say what to do"),
    (("lab", "check", "two.py", "--max-seconds", "0"), "--max-seconds: must be a positive number of seconds"),
])
def test_what_cannot_be_checked_is_one_line(run_cli, tmp_path, args, says):
    (tmp_path / "bad.py").write_text("def attention_by_hand(q, k, v)\n")
    (tmp_path / "two.py").write_text("def attention_by_hand(q, k):\n    return q\n")
    r = run_cli(*args)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_start_a_level_and_an_unknown_level_is_one_line_naming_them(run_cli, tmp_path):
    r = run_cli("lab", "start", "mylab", "--level", "flash")
    assert r.returncode == 0 and "wrote mylab/lab_flash.py: level 4" in r.stdout
    assert "def flash_forward(q, k, v, is_causal=False, block_q=64, block_k=64):" in (
        tmp_path / "mylab" / "lab_flash.py").read_text()
    bad = run_cli("lab", "check", "mylab/lab_flash.py", "--level", "fast")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert "no level 'fast'; the levels are 1 loops, 2 matrix, 3 module, 4 flash, 5 backward, 6 decode" in bad.stderr
