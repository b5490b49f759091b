"""The command line: every command once through its real entry point (a subprocess), and what demo and verify
write, in this process. Each usage error is a line of the table in tests/cli/test_errors.py."""

import json

import pytest

from attnlab.cli import main
from attnlab.demo import DemoResult
from attnlab.judge import apis
from attnlab.judge.repro import Reproduced
from tests import cli_batch

PNG = b"\x89PNG\r\n\x1a\n"

# one usage error per command, and the words its one line on stderr starts with
ENTRY = [("demo", ["--seed", "x"], "argument --seed"), ("verify", ["--impl", "fast"], "unknown impl 'fast'"),
         ("bench", ["--impl", "fast"], "unknown impl 'fast'"),
         ("explore", ["no-such-thing"], "unknown experiment 'no-such-thing'"),
         ("lesson", ["--seed", "-3"], "argument --seed"), ("lab", ["check", "nosuch"], "nosuch: no such file"),
         ("train", ["--steps", "0"], "argument --steps"), ("sample", ["--ckpt", "missing.pt"], "checkpoint missing.pt"),
         ("ring", ["--world", "0"], "world must be a positive integer")]


@pytest.mark.slow
def test_every_command_through_python_m_attnlab_is_exit_2_and_one_line(tmp_path):
    """Each command's usage error through ``python -m attnlab``'s own entry module, all in one child process (the
    interpreter's start is the same for each: tests/cli_batch.py)."""
    got = cli_batch.run_all([[command, *args] for command, args, _ in ENTRY], tmp_path)
    for (command, _, says), r in zip(ENTRY, got, strict=True):
        print(command, r)
        assert r["code"] == 2, command
        assert len(r["stderr"].strip().splitlines()) == 1 and "Traceback" not in r["stderr"], command
        assert r["stderr"].startswith(f"attnlab {command}: error: {says}"), r["stderr"]


@pytest.mark.slow
def test_demo_writes_figures_and_json(tmp_path, capsys, round_trip):
    assert main(["demo", "--out", str(tmp_path / "out"), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    print(out)
    assert out.count("OK") == 4 and "FAIL" not in out
    assert "d = 256" in out
    for name in ("attention_map.png", "scale_demo.png"):
        data = (tmp_path / "out" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    j = json.loads((tmp_path / "out" / "demo.json").read_text())
    assert j["seed"] == 1 and len(j["checks"]) == 4 and all(c["ok"] for c in j["checks"])
    i = j["widths"].index(256)
    assert j["peak"]["none"][i] > 0.7 > 0.2 > j["peak"]["sqrt"][i] > j["peak"]["inv"][i]
    w = j["map_weights"]
    assert all(w[r][c] == 0 for r in range(len(w)) for c in range(r + 1, len(w)))  # causal: upper triangle zero
    assert "torch" in j["versions"] and "cpu" in j["machine"]
    assert round_trip(j, DemoResult).checks[0].ok


@pytest.mark.slow
def test_verify_passes_for_a_registered_form(tmp_path, capsys, round_trip):
    path = tmp_path / "v.json"
    assert main(["verify", "--impl", "matrix", "--device", "cpu", "--dtype", "float32", "--quick", "--json",
                 str(path)]) == 0
    out = capsys.readouterr().out
    assert "oracle check: PyTorch in float64 agrees with the float64 oracle on every case" in out
    n = len(apis.cases("sdpa", ["float32"], long=False))  # the grid and the probes
    assert "ALL PASS" in out and f"{n} passed, 0 failed" in out
    j = json.loads(path.read_text())
    assert len(j["rows"]) == n and j["rows"][0]["comparisons"][0]["quantity"] == "out"
    assert round_trip(j, Reproduced).passed and j["device"] == "cpu" and j["diagnoses"] == {} and j["repros"] == {}


@pytest.mark.slow
def test_verify_users_own_function_and_exit_code(tmp_path, capsys, monkeypatch):
    (tmp_path / "myattn.py").write_text(
        "import torch\n"
        "def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):\n"
        "    s = q @ k.transpose(-2, -1)  # forgot the scale\n"
        "    return torch.softmax(s, -1) @ v\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # where verify's child process finds the module
    assert main(["verify", "--impl", "myattn:attention", "--dtype", "float32", "--quick", "--show", "failures",
                 "--only", "basic"]) == 1
    out = capsys.readouterr().out
    print(out)
    assert "FAILURES" in out and "myattn:attention" in out and "FAILURES: 0 passed, 1 failed" in out
    assert "the output is attention without the scale" in out  # the cause, named


def test_verify_json_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["verify", "--impl", "matrix", "--dtype", "float64", "--quick", "--json",
                 str(tmp_path / "afile" / "v.json")]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "cannot write" in captured.err
    assert "passed" not in captured.out  # refused before the grid ran
