"""The tolerance rule holds for every seed and still fails wrong forms; verify checks other people's code."""

import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

import attnlab
from attnlab.judge import apis, rule, verify
from attnlab.judge.verify import Case
from attnlab.report.terminal import verify_table
from tests.helpers import qkv

ATTNLAB = os.path.join(os.path.dirname(sys.executable), "attnlab")


def sdpa_fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def ignores_dropout(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return sdpa_fn(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)


def unscaled_dropout(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return sdpa_fn(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) * (1 - dropout_p)


def bf16_softmax(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """A subtly wrong form: right formula, but the weights rounded through bfloat16."""
    s = (q @ k.transpose(-2, -1)) * (scale or q.shape[-1] ** -0.5)
    return torch.softmax(s, -1).bfloat16().to(q.dtype) @ v


@pytest.mark.slow
@pytest.mark.parametrize("seed", [4242, 99991])
def test_quick_grid_passes_at_unlisted_seeds_for_every_form_and_pytorch(seed):
    cases = verify.default_cases(["float32"], long=False)
    targets = {f: attnlab.forms()[f].fn for f in ("matrix", "flash", "sdpa")}
    r = verify.verify(targets, cases, seed=seed)
    worst = max(row.worst.err / row.worst.allowed for row in r.rows if row.worst)
    print(f"seed {seed}: {r.counts()}, worst err/limit {worst:.3f}")
    assert r.passed, [(x.form, x.case, x.worst, x.detail) for x in r.rows if x.status != "pass"]


def test_the_floor_grows_with_the_size_of_the_numbers():
    q, k, v, go = qkv(1, 2, 2, 16, 16, 8, dtype=torch.float32, grad_out=True)
    small = rule.rounding_floor(q, k, v, grad_out=go, dtype=torch.float32)
    big = rule.rounding_floor(q, k, v * 1000, grad_out=go, dtype=torch.float32)
    print(small, big, sep="\n")
    assert big["out"] == pytest.approx(1000 * small["out"], rel=1e-6)
    assert big["dq"] > 100 * small["dq"] and big["dv"] == pytest.approx(small["dv"], rel=1e-6)
    assert 1e-7 < small["out"] < 1e-4  # about 1e-6 of outputs of size ~1 in float32: it means something


def test_a_subtly_wrong_form_still_fails():
    r = verify.verify({"bf16_softmax": bf16_softmax}, [Case("basic"), Case("head dim 40, L=97", L=97, E=40)],
                      timeout=None)
    for row in r.rows:
        print(row.case, row.status, row.worst)
    assert all(row.status == "fail" for row in r.rows)


def test_dropout_rows_can_fail():
    cases = [Case("dropout 0.2", dropout_p=0.2), Case("dropout 0.5 causal", is_causal=True, dropout_p=0.5)]
    targets = {"sdpa": attnlab.forms()["sdpa"].fn, "flash": attnlab.forms()["flash"].fn,
               "ignores": ignores_dropout, "unscaled": unscaled_dropout}
    r = verify.verify(targets, cases, timeout=None)
    status = {(row.form, row.case): row for row in r.rows}
    for row in r.rows:
        print(row.form, row.case, row.status, row.worst, row.detail)
    for c in cases:
        assert status[("sdpa", c.name)].status == "pass"  # PyTorch's own dropout, read through v = I
        assert status[("flash", c.name)].status == "pass"  # attnlab's shared dropout
        assert status[("ignores", c.name)].status == "fail"
        assert "dropped 0.0% of the weights" in status[("ignores", c.name)].detail
        assert status[("unscaled", c.name)].status == "fail"
        assert status[("flash", c.name)].worst.allowed < 1e-3  # the limit is no longer ~2


def test_no_dropout_skips_and_says_so():
    r = verify.verify({"ignores": ignores_dropout}, [Case("basic"), Case("dropout", dropout_p=0.3)],
                      check_dropout=False)
    assert [row.status for row in r.rows] == ["pass", "skipped"]
    assert r.rows[1].detail == "dropout not checked (--no-dropout)"


def test_a_hanging_function_is_a_fail_row_and_verify_ends():
    def hangs(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if q.shape[-2] == 17:
            time.sleep(600)
        return sdpa_fn(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    cases = [Case("basic"), Case("no batch dims", batch=(), H=2, L=17, E=16), Case("causal", is_causal=True)]
    t = time.perf_counter()
    r = verify.verify({"hangs": hangs}, cases, timeout=1.0)
    print([(row.status, row.detail) for row in r.rows], time.perf_counter() - t)
    assert [row.status for row in r.rows] == ["pass", "fail", "skipped"]
    assert r.rows[1].detail.startswith("timed out: no answer after 1.0 s")
    assert time.perf_counter() - t < 30


def test_long_reasons_wrap_in_the_table():
    def long_error(q, k, v, **kw):
        raise RuntimeError("a long reason [in brackets] " + "that goes on " * 20 + "THE END")

    r = verify.verify({"long": long_error}, [Case("basic")])
    console = Console(width=120, record=True)
    console.print(verify_table(r))
    text = console.export_text()
    print(text)
    assert "THE END" in text and "[in brackets]" in text and "…" not in text


@pytest.mark.slow
def test_impl_imports_from_the_current_directory_under_the_console_script(tmp_path):
    (tmp_path / "myattn.py").write_text(textwrap.dedent("""
        import torch.nn.functional as F

        def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                  is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)

        def no_dropout(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            return attention(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)
    """))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    only = "basic,dropout 0.2,score_mod softcap"  # the entry point and the skips, not the whole grid again
    r = subprocess.run([ATTNLAB, "verify", "--quick", "--dtype", "float32", "--show", "failures", "--impl",
                        "myattn:no_dropout", "--no-dropout", "--only", only], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    print(r.stdout[-500:], r.stderr[-2000:])
    # skipped: the dropout cases (--no-dropout) and the score-modifier cases (no score_mod= keyword)
    from attnlab.cli.verify import _only

    cases = _only(verify.default_cases(["float32"], long=False), only)
    skipped = sum(c.dropout_p > 0 or c.mod is not None for c in cases)
    assert skipped == 2 and len(cases) == 3
    assert r.returncode == 0 and "ALL PASS" in r.stdout and f"{skipped} skipped" in r.stdout
    assert "(dropout not checked: --no-dropout)" in r.stdout


def test_timeout_flag_is_checked(capsys):
    from attnlab.cli import main

    with pytest.raises(SystemExit) as e:
        main(["verify", "--timeout", "0"])
    assert e.value.code == 2 and "must be a positive number of seconds" in capsys.readouterr().err


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_dtype_given_twice_runs_once(capsys):
    from attnlab.cli import main

    assert main(["verify", "--impl", "sdpa", "--quick", "--dtype", "float32,float32", "--show", "failures"]) == 0
    out = capsys.readouterr().out
    print(out[-300:])
    cases = [c for c in apis.cases("sdpa", ["float32"], long=False)  # the grid and the probes; the sink cases
             if not c.sinks]  # give no rows to a function that takes no sinks= (it has its other cases)
    mods = sum(c.mod is not None for c in cases)  # sdpa takes no score_mod=: those cases are skipped
    assert f"ALL PASS: {len(cases) - mods} passed, 0 failed, 0 errors, {mods} skipped" in out


def test_flash_gives_exact_zero_where_the_true_gradient_is_zero():
    worst = 0.0
    for seed in range(10):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(2, 3, n, 24, generator=g).requires_grad_() for n in (40, 40, 40))
        attnlab.attention(q, k, v, is_causal=True, impl="flash").backward(torch.randn(2, 3, 40, 24, generator=g))
        worst = max(worst, q.grad[:, :, 0].abs().max().item())  # row 0 sees only key 0: dq = 0
        q1, k1, v1 = (torch.randn(2, 3, n, 24, generator=g).requires_grad_() for n in (33, 1, 1))
        attnlab.attention(q1, k1, v1, impl="flash").backward(torch.randn(2, 3, 33, 24, generator=g))
        worst = max(worst, q1.grad.abs().max().item(), k1.grad.abs().max().item())  # S = 1: dq = dk = 0
    print("largest |dq|, |dk| where the true gradient is 0:", worst)
    assert worst == 0.0


def test_pytorch_nan_answer_leaves_the_floor_alone():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    c = rule.compare("out", ref.float(), torch.tensor([math.nan, 2.0]), ref, torch.float32, rounding=1e-6)
    assert c.passed and math.isnan(c.torch_err) and c.allowed == pytest.approx(1e-6 + rule.floor(ref, torch.float32))


def test_skipped_cases_are_one_row_per_reason_unless_every_row_is_asked_for():
    from attnlab.report import plain

    def no_masks(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None:
            raise attnlab.Unsupported("no attn_mask here")
        if is_causal:
            raise attnlab.Unsupported("no causal mask here")
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)

    cases = [Case("basic"), Case("bool mask", mask="bool"), Case("float mask", mask="float"),
             Case("padding", mask="padding"), Case("causal", is_causal=True), Case("causal, L=1", is_causal=True, L=1)]
    r = verify.verify({"no_masks": no_masks}, cases, check_dropout=False)
    assert [row.status for row in r.rows].count("skipped") == 5, [(row.case, row.status) for row in r.rows]
    judged = verify_table(r, table=plain.Table).lines()
    every = verify_table(r, "all", table=plain.Table).lines()
    print("\n".join(judged), "\n", "\n".join(every), sep="\n")
    skipped = [line for line in judged if "SKIPPED" in line]
    assert len(skipped) == 2 and any("3 case(s), e.g. bool mask" in s and "no attn_mask here" in s for s in skipped) \
        and any("2 case(s), e.g. causal" in s and "--show all lists them" in s for s in skipped), skipped
    assert sum("SKIPPED" in line for line in every) == 5 and any("PASS" in line for line in judged)
    assert not any("SKIPPED" in line for line in verify_table(r, "failures", table=plain.Table).lines())
    with pytest.raises(ValueError, match="show='some': choose from 'judged', 'all', 'failures'"):
        verify_table(r, "some")
