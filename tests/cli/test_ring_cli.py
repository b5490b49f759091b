"""`attnlab ring` end to end (in this process; the ranks are its children), under torchrun, and its usage errors.

Ctrl-C and a full disk, with the processes left counted, are in tests/cli/test_nothing_left.py.
"""

import json
import re
import subprocess
import sys
import uuid

import pytest

from attnlab.cli import main
from attnlab.distributed import launch
from attnlab.distributed import ring as lab_ring
from attnlab.distributed.budget import Estimate
from attnlab.distributed.launch import free_port
from tests.processes import left_by, marked_env


@pytest.mark.slow
def test_ring_command_checks_measures_and_writes_json(tmp_path, capsys, round_trip):
    path = tmp_path / "ring.json"
    code = main(["ring", "--world", "2", "--seq", "64", "--heads", "2", "--head-dim", "8", "--causal", "--layout",
                 "zigzag", "--backward", "--repeats", "1", "--json", str(path)])
    out = capsys.readouterr().out
    print(out)
    assert code == 0
    for text in ("attnlab ring: 2 ranks (gloo on 127.0.0.1), T=64 (32 per rank)", "causal, zigzag layout",
                 "forward + backward", "max error against the float64 oracle", "one step per rank",
                 "flash, 1 process", "work per rank", "busiest / mean", "memory: the largest rank needs",
                 "time: ring", "ALL PASS"):
        assert text in out
    j = json.loads(path.read_text())
    assert [x["layout"] for x in j["layouts"]] == ["zigzag", "contiguous"]
    assert all(c["passed"] for x in j["layouts"] for c in x["comparisons"])
    assert [c["quantity"] for c in j["layouts"][0]["comparisons"]] == ["out", "dq", "dk", "dv"]
    zig, cont = ([w["scores"] for w in x["work"]] for x in j["layouts"])
    assert zig[0] == zig[1] and cont[0] < cont[1]  # causal: zigzag even, contiguous lopsided
    assert len(j["ranks"]) == 2 and all(r["time_s"] > 0 for r in j["ranks"])
    assert j["flash_time_s"] > 0 and j["config"]["world"] == 2 and "torch" in j["versions"]
    assert "estimated about" in out and "memory of the check in this process" in out
    assert 0 < j["check_peak_bytes"] <= j["estimate"]["check_bytes"]  # the estimate errs on the side of caution
    back = round_trip(j, lab_ring.RingResult)
    assert back.layouts[0].comparisons[0].passed and round_trip(j["estimate"], Estimate).check_bytes > 0


@pytest.mark.parametrize("argv, words", [
    (["--world", "4", "--seq", "30"], ["sequence length 30 is not divisible by the world size 4"]),
    (["--world", "4", "--seq", "36", "--layout", "zigzag"], ["36", "2 x world size = 8 chunks"]),
    (["--world", "0"], ["world must be a positive integer, got 0"]),
    (["--heads", "4", "--kv-heads", "3"], ["kv_heads must divide heads", "3 and 4"]),
    (["--dtype", "int8"], ["dtype must be one of"]),
    (["--timeout", "inf"], ["timeout (the process group's) must be a positive number of seconds, at most 86400 "
                            "(a day), got inf"]),
    (["--timeout", "0"], ["timeout (the process group's) must be a positive number of seconds, at most 86400 "
                          "(a day), got 0.0"]),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, words, capsys):
    assert main(["ring", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("attnlab ring: error: ")
    for w in words:
        assert w in err


def test_under_torchrun_the_world_is_torchruns(monkeypatch, capsys):
    for name, value in (("TORCHELASTIC_RUN_ID", "test"), ("RANK", "0"), ("WORLD_SIZE", "3"), ("LOCAL_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    assert main(["ring", "--world", "2"]) == 2
    assert "--world 2, but torchrun started 3 processes (WORLD_SIZE)" in capsys.readouterr().err
    assert main(["ring", "--seq", "64"]) == 2  # checked before joining any group
    assert "sequence length 64 is not divisible by the world size 3" in capsys.readouterr().err


@pytest.mark.slow
def test_under_torchrun_every_process_joins_and_rank_0_reports():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "attnlab", "ring", "--seq", "32", "--heads", "2",
           "--head-dim", "8", "--causal", "--layout", "zigzag", "--backward", "--no-measure", "--timeout", "20"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    print(r.stdout, r.stderr[-2000:])
    assert r.returncode == 0
    assert r.stdout.count("attnlab ring: 2 ranks (gloo via torchrun)") == 1 and "ALL PASS" in r.stdout


def test_json_that_cannot_be_written_is_refused_before_the_launch(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["ring", "--seq", "64", "--no-measure", "--json", str(tmp_path / "afile" / "ring.json")]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "cannot write" in captured.err
    assert "ALL PASS" not in captured.out  # nothing was launched


@pytest.mark.parametrize("argv, words", [
    (["--world", "4", "--seq", "1000000000"], ["T=1000000000 on 4 ranks needs about", "TiB", "more than the limit of",
                                               "free now"]),
    (["--world", "4", "--seq", "262144", "--heads", "1", "--head-dim", "16", "--causal", "--backward"],
     ["would take about", "a launch is stopped after 10 min (--time-limit)"]),
    (["--seq", "8192", "--backward", "--time-limit", "1"], ["a launch is stopped after 1 s (--time-limit)"]),
])
def test_what_will_not_fit_is_refused_before_the_launch(argv, words, capsys, monkeypatch):
    launched = []
    monkeypatch.setattr(launch, "launch", lambda *a, **kw: launched.append(a))  # an estimate, not a run
    assert main(["ring", *argv]) == 2
    err = capsys.readouterr().err
    print(err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("attnlab ring: error: ")
    for w in words:
        assert w in err
    assert launched == []


@pytest.mark.slow
def test_a_transfer_that_times_out_is_one_line_without_cpp_frames():
    tag = uuid.uuid4().hex
    r = subprocess.run([sys.executable, "-m", "attnlab", "ring", "--world", "2", "--seq", "256", "--no-measure",
                        "--timeout", "0.001"], capture_output=True, text=True, timeout=120, env=marked_env(tag))
    left = left_by(tag)  # right after the exit: no rank, fork server or tracker still running
    print(r.stderr, left)
    assert left == {}
    # Behaviour, not wording: where it fails (joining the group, the store, a transfer) and what gloo or the
    # store says then depends on the machine's load, so no library's words are asserted.
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1
    assert re.match(r"attnlab ring: failed: rank \d+ of 2\b", r.stderr), r.stderr  # the rank named
    assert "frame #" not in r.stderr and "Traceback" not in r.stderr and len(r.stderr) < 600


@pytest.mark.slow
def test_progress_is_told_what_the_ranks_and_the_check_are_doing():
    said = []
    result = lab_ring.run(lab_ring.RingConfig(world=2, seq=64, heads=2, head_dim=8, causal=True, backward=True,
                                              measure=False), said.append)
    print(said)
    assert result.passed and result.check_peak_bytes is not None
    assert any(s.startswith(("2 ranks: ", "rank 0: ")) for s in said)
    assert "checking: the float64 oracle, query rows 64 of 64" in said and "checking: PyTorch's own answer" in said
