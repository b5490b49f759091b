"""`attnlab explore` end to end: the list, one experiment's figure and numbers, an unknown name."""

import json

from attnlab.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def test_explore_lists_runs_and_rejects(tmp_path, capsys):
    assert main(["explore"]) == 0
    out = capsys.readouterr().out
    for name in ("no-mask", "same-token", "inv-scale", "trust", "online-softmax", "sinks"):
        assert name in out

    assert main(["explore", "same-token", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "without positions the two copies differ by 0 in query" in out and "with RoPE" in out
    assert (tmp_path / "out" / "explore-same-token.png").read_bytes().startswith(PNG)
    j = json.loads((tmp_path / "out" / "explore-same-token.json").read_text())
    assert j["without_positions"]["out"] == 0.0 and j["with_rope"]["out"] > 0

    assert main(["explore", "no-such-thing"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unknown experiment 'no-such-thing'" in err
