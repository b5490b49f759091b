"""The command line end to end, through a subprocess."""

import json

import pytest

from attnlab.lab.check import verify
from attnlab.lab.check.verify import VerifyResult
from attnlab.lab.demo import DemoResult

PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow  # every test runs the command in a subprocess


def test_demo_writes_figures_and_json(run_cli, tmp_path, round_trip):
    r = run_cli("demo", "--out", "out", "--seed", "1")
    print(r.stdout, r.stderr)
    assert r.returncode == 0
    assert r.stdout.count("OK") == 4 and "FAIL" not in r.stdout
    assert "d = 256" in r.stdout
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


def test_verify_passes_for_a_registered_form(run_cli, tmp_path, round_trip):
    r = run_cli("verify", "--impl", "matrix", "--device", "cpu", "--dtype", "float32", "--quick", "--json", "v.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oracle check: PyTorch in float64 agrees with the float64 oracle on every case" in r.stdout
    n = len(verify.default_cases(["float32"], long=False))
    assert "ALL PASS" in r.stdout and f"{n} passed, 0 failed" in r.stdout
    j = json.loads((tmp_path / "v.json").read_text())
    assert len(j["rows"]) == n and j["rows"][0]["comparisons"][0]["quantity"] == "out"
    assert round_trip(j, VerifyResult).passed and j["device"] == "cpu" and j["diagnoses"] == {}


def test_verify_users_own_function_and_exit_code(run_cli, tmp_path):
    (tmp_path / "myattn.py").write_text(
        "import torch\n"
        "def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):\n"
        "    s = q @ k.transpose(-2, -1)  # forgot the scale\n"
        "    return torch.softmax(s, -1) @ v\n")
    r = run_cli("verify", "--impl", "myattn:attention", "--dtype", "float32", "--quick", "--show", "failures",
                env={"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 1
    assert "FAILURES" in r.stdout and "myattn:attention" in r.stdout


def test_bad_impl_is_one_line_exit_2(run_cli):
    for spec, msg in [("nosuchmodule:fn", "cannot import module"), ("fast", "unknown impl 'fast'"),
                      ("ring", "check it with `attnlab ring`")]:
        r = run_cli("verify", "--impl", spec)
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr
        assert "Traceback" not in r.stderr


def test_bad_flags_are_one_line_exit_2(run_cli):
    big = "99999999999999999999999"  # past what torch's generator takes: was an OverflowError traceback
    for args in (["verify", "--dtype", "int8"], ["demo", "--seed", "x"], ["nope"], ["demo", "--seed", big],
                 ["verify", "--seed", big], ["ring", "--seed", big], ["demo", "--seed", "-1"]):
        r = run_cli(*args)
        assert r.returncode == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and "error" in r.stderr


def test_verify_json_that_cannot_be_written_is_one_line_exit_2_before_the_run(run_cli, tmp_path):
    (tmp_path / "afile").write_text("")
    r = run_cli("verify", "--impl", "matrix", "--dtype", "float64", "--quick", "--json", "afile/v.json")
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "cannot write afile/v.json" in r.stderr
    assert "Traceback" not in r.stderr and "passed" not in r.stdout  # refused before the grid ran


def test_an_output_folder_that_cannot_take_files_is_one_line_exit_2(run_cli, tmp_path):
    (tmp_path / "afile").write_text("")
    for args in (["demo", "--out", "/proc"], ["bench", "--out", "/proc", "--seq", "16", "--impl", "matrix"],
                 ["demo", "--out", "afile"]):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert "output folder /proc" in r.stderr or "afile is a file, not a folder" in r.stderr
