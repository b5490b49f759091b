"""`attnlab explore` end to end, through a subprocess."""

import json

import pytest

PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow  # every test runs the command in a subprocess


def test_explore_lists_runs_and_rejects(run_cli, tmp_path):
    r = run_cli("explore")
    assert r.returncode == 0, r.stderr
    for name in ("no-mask", "same-token", "inv-scale", "trust", "online-softmax"):
        assert name in r.stdout

    r = run_cli("explore", "same-token", "--out", "out")
    assert r.returncode == 0, r.stderr
    assert "without positions the two copies differ by 0 in query" in r.stdout and "with RoPE" in r.stdout
    assert (tmp_path / "out" / "explore-same-token.png").read_bytes().startswith(PNG)
    j = json.loads((tmp_path / "out" / "explore-same-token.json").read_text())
    assert j["without_positions"]["out"] == 0.0 and j["with_rope"]["out"] > 0

    r = run_cli("explore", "no-such-thing")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "unknown experiment 'no-such-thing'" in r.stderr and "Traceback" not in r.stderr
