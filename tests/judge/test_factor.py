"""A factor so large that the limit exceeds the answer's own size judges nothing, and the verdict says so (before,
``verify --factor 1e9`` passed a kernel whose output is all zeros)."""

import torch
import torch.nn.functional as F

from attnlab.cli import main
from attnlab.judge import verify
from attnlab.judge.verify import Case
from attnlab.report import plain
from attnlab.report.terminal import verify_summary

CASES = [Case("basic", (2,), H=2, L=16, E=8), Case("causal", (1,), H=2, L=12, E=8, is_causal=True)]


def zeros(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return torch.zeros_like(q[..., :v.shape[-1]]) + 0 * (q.sum() + k.sum() + v.sum())


def right(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale)


def test_a_factor_that_admits_zeros_judges_nothing():
    r = verify.verify({"zeros": zeros}, CASES, factor=1e9)
    line = plain.strip(verify_summary(r, ["zeros"]))
    print(line)
    assert all(row.status == "pass" for row in r.rows)  # each row alone passes: that is the trap
    assert not r.passed and r.vacuous()
    assert line.startswith("JUDGED NOTHING") and "the factor 1e+09 judges nothing on" in line
    assert "an output of zeros would pass" in line
    assert 2 <= r.judging_factor() < 1e9


def test_the_rule_s_own_factor_and_a_modest_one_still_judge():
    assert not verify.verify({"zeros": zeros}, CASES).passed  # zeros fail at 2x
    for factor in (2.0, 4.0):
        r = verify.verify({"right": right}, CASES, factor=factor)
        print(factor, [c.allowed for row in r.rows for c in row.comparisons])
        assert r.passed and not r.vacuous()


def test_the_command_line_ends_such_a_run_in_a_failing_verdict(capsys):
    assert main(["verify", "--impl", "matrix", "--factor", "1e9", "--only", "basic", "--quick"]) == 1
    out = capsys.readouterr().out
    print(out)
    assert "JUDGED NOTHING" in out and "judges nothing on" in out
