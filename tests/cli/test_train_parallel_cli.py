"""`attnlab train` across ranks: --procs and --context-parallel, torchrun, resume, a killed rank, usage errors."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.distributed import launch
from attnlab.distributed.launch import free_port
from attnlab.distributed.servers import children as servers_children
from tests.processes import left_by, marked_env

TINY = ["train", "--preset", "tiny", "--scale", "sqrt"]


@pytest.mark.parametrize("args, msg", [
    (["--procs", "2", "--context-parallel", "3"], "--context-parallel 3 does not divide the 2 ranks"),
    (["--context-parallel", "2", "--impl", "matrix"], "--impl matrix does not apply"),
    (["--procs", "3"], "batch_size 8 does not split over 3 data-parallel ranks"),
    (["--context-parallel", "3"], "block_size (the sequence length) 32 is not divisible by the 2 x world size = 6"),
    (["--timeout", "0"], "must be a positive number of seconds, at most 86400 (a day)"),
    (["--procs", "0"], "positive integer"),
])
def test_bad_grids_are_one_line_and_exit_2(args, msg, capsys, tmp_path):
    try:
        code = main([*TINY, *args, "--out", str(tmp_path)])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and msg in err and "Traceback" not in err
    assert not (tmp_path / "checkpoints").exists()  # refused before any rank started


def test_under_torchrun_the_ranks_are_torchruns(monkeypatch, capsys):
    for name, value in (("TORCHELASTIC_RUN_ID", "test"), ("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"),
                        ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    assert main([*TINY, "--procs", "4"]) == 2
    assert "--procs 4, but torchrun started 2 processes (WORLD_SIZE)" in capsys.readouterr().err
    assert main([*TINY, "--context-parallel", "4"]) == 2  # checked before joining any group
    assert "--context-parallel 4 does not divide the 2 ranks" in capsys.readouterr().err


def test_what_every_rank_refuses_is_said_once(monkeypatch, capsys, tmp_path):
    said = "checkpoint c.pt was trained with other settings (context_parallel: 2 -> 1)"
    why = f"UsageError: {said} (at train.py:9)"
    refused = [launch.Outcome(r, 1, None, why, raised="UsageError", message=said) for r in range(2)]
    monkeypatch.setattr(launch, "launch", lambda *a, **k: refused)
    assert main([*TINY, "--procs", "2", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("attnlab train: error: checkpoint c.pt was trained with other settings "
                                       "(context_parallel: 2 -> 1)\n")
    other = [refused[0], launch.Outcome(1, -9, None, "exited with code -9")]
    monkeypatch.setattr(launch, "launch", lambda *a, **k: other)
    assert main([*TINY, "--procs", "2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training across 2 processes failed: rank 0 of 2: UsageError: checkpoint" in err
    assert "(then 1 other rank failed or was stopped)" in err


# two ranks training through the console script (14 s in a busy suite): make test-long; make test launches
# --context-parallel through it in tests/cli/test_nothing_left.py and checks the training in-process
# (tests/distributed/test_train_parallel.py)
@pytest.mark.long
@pytest.mark.slow
def test_procs_with_context_parallel_writes_once(run_cli, tmp_path):
    r = run_cli(*TINY, "--procs", "2", "--context-parallel", "2", "--steps", "4", "--eval-every", "2", "--out", "out",
                "--timeout", "30")
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    assert "2 ranks over gloo: data parallel 1 x context parallel 2 (zigzag ring attention)" in r.stdout
    assert "each holds 8 sequences x 16 tokens" in r.stdout
    assert r.stdout.count("wrote out/train.json") == 1  # rank 0 alone reports and writes
    j = json.loads((tmp_path / "out" / "train.json").read_text())
    assert j["config"]["context_parallel"] == 2 and j["variants"]["sqrt"]["step"] == [0, 2, 4]


# torchrun's launch is proven in make test by the ring's (tests/cli/test_ring_cli.py); training under it here
@pytest.mark.long
@pytest.mark.slow
def test_under_torchrun_two_ranks_train_and_rank_0_reports(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "attnlab", *TINY, "--steps", "2", "--eval-every", "2",
           "--out", str(tmp_path), "--timeout", "30"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    print(r.stdout, r.stderr[-2000:])
    assert r.returncode == 0
    assert r.stdout.count("2 ranks over gloo: data parallel 2 x context parallel 1") == 1
    assert (tmp_path / "train.png").is_file() and (tmp_path / "checkpoints" / "scale-sqrt.pt").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the ranks through /proc")
def test_a_killed_rank_ends_the_run_with_one_line(tmp_path):
    cmd = [sys.executable, "-m", "attnlab", *TINY, "--procs", "2", "--steps", "100000", "--eval-every", "100000",
           "--out", str(tmp_path), "--timeout", "10"]
    tag = uuid.uuid4().hex
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=marked_env(tag))
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "checkpoints" / "scale-sqrt.pt").is_file():  # step 0 is saved: training runs
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        servers = [c for c in servers_children(p.pid) if b"forkserver" in Path(f"/proc/{c}/cmdline").read_bytes()]
        ranks = [r for s in servers for r in servers_children(s)]
        assert len(ranks) == 2, ranks
        t0 = time.monotonic()
        os.kill(max(ranks), signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    left = left_by(tag)  # right after the exit: the other rank, the fork server and the tracker have ended too
    print(f"exit {p.returncode} after {took:.1f} s: {err}", left)
    assert left == {}
    assert p.returncode == 2 and took < 60  # it ends (communicate's limit), however busy the machine is
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "attnlab train: error: training across 2 processes failed: rank 1 of 2: killed by SIGKILL" in err
    assert "pair.cc" not in err
