"""verify judges what a kernel has: refusals by attnlab.Unsupported are skips (any other exception an error),
a forward without a backward is judged alone, gradients come through .backward() where autograd.grad is refused,
dropout is read for any Ev, and the rule's factor is the caller's to raise, said in the summary. Each option still
fails a wrong function."""

import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import attnlab
from attnlab.cli import main
from attnlab.judge import judge, oracle, rule, verify
from attnlab.judge.cases import Case, default_cases
from attnlab.report import plain
from attnlab.report.terminal import untested_lines, verify_summary
from tests.helpers import named

BASIC = [Case("basic", batch=(1,), H=2, L=24, E=16), Case("causal", batch=(1,), H=2, L=24, E=16, is_causal=True)]
DROP = Case("dropout 0.2, Ev != S", batch=(1,), H=2, L=24, S=40, E=16, Ev=8, dropout_p=0.2)


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=scale, enable_gqa=enable_gqa)


def unscaled(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return sdpa(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)


def rows_of(fn, cases, **kw):
    return verify.verify({"f": fn}, cases, timeout=None, **kw)


def test_a_refusal_by_attnlab_unsupported_is_a_skip_and_is_listed_any_other_exception_is_an_error():
    assert attnlab.Unsupported is attnlab.kernels.Unsupported and "Unsupported" in attnlab.__all__

    def refuses(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if is_causal:
            raise attnlab.Unsupported("is_causal=True: this kernel has no causal mask")
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    def says_value_error(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if is_causal:
            raise ValueError("is_causal=True: this kernel has no causal mask")
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    def not_implemented(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        raise NotImplementedError("not yet")

    r = rows_of(refuses, BASIC)
    assert [x.status for x in r.rows] == ["pass", "skipped"] and r.passed
    assert r.rows[1].detail == "is_causal=True: this kernel has no causal mask"
    lines = [plain.strip(x) for x in untested_lines(r)]
    print("\n".join(lines))
    assert lines[0] == "not tested:"
    assert "f: 1 case(s) in float32, e.g. 'causal': is_causal=True: this kernel" in lines[1]
    bad = rows_of(says_value_error, BASIC)
    assert [x.status for x in bad.rows] == ["pass", "error"] and not bad.passed
    assert not untested_lines(bad)
    ni = rows_of(not_implemented, BASIC[:1])
    assert ni.rows[0].status == "error" and "raise attnlab.Unsupported" in untested_lines(ni)[-1]


def test_forward_only_judges_a_kernel_without_a_backward_and_still_fails_a_wrong_forward():
    def no_backward(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if q.requires_grad:
            raise RuntimeError("this kernel has no backward")
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    assert not rows_of(no_backward, BASIC).passed  # with gradients asked for, it cannot pass
    r = rows_of(no_backward, BASIC, backward=False)
    assert r.passed and not r.backward and all([c.quantity for c in x.comparisons] == [
        "out", "out (no_grad)", "out (inference_mode)"] for x in r.rows)  # the output, then the inference path's
    assert "the output only, no gradient" in verify_summary(r, ["f"])
    wrong = rows_of(unscaled, BASIC, backward=False)
    assert [x.status for x in wrong.rows] == ["fail", "fail"]


def test_gradients_through_backward_only_reentrant_checkpointing_is_judged_and_a_wrong_one_fails():
    def checkpointed(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return checkpoint(sdpa, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, use_reentrant=True)

    def checkpointed_wrong(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return checkpoint(unscaled, q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, use_reentrant=True)

    transposed = Case("transposed views", batch=(1,), H=2, L=24, E=16, layout="transposed")
    r = rows_of(checkpointed, [*BASIC, transposed])
    assert r.passed and all(len(x.comparisons) == 6 for x in r.rows), [(x.status, x.detail) for x in r.rows]
    assert [x.status for x in rows_of(checkpointed_wrong, BASIC).rows] == ["fail", "fail"]


def test_the_dropout_probe_reads_a_function_whose_value_head_dim_is_not_s():
    def needs_ev_eq_e(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if v.shape[-1] != 8:  # a kernel compiled for one value head dim
            raise attnlab.Unsupported(f"Ev={v.shape[-1]}: this kernel takes Ev=8")
        return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)

    def unscaled_dropout(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return needs_ev_eq_e(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) * (1 - dropout_p)

    r = rows_of(needs_ev_eq_e, [DROP])
    assert r.rows[0].status == "pass", (r.rows[0].detail, r.rows[0].worst)
    assert rows_of(unscaled_dropout, [DROP]).rows[0].status == "fail"


def test_the_factor_widens_only_the_multiple_of_pytorchs_error_is_recorded_and_said():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    theirs = (ref + 1e-6).float()
    mine = (ref + 3e-6).float()
    assert not rule.compare("out", mine, theirs, ref, torch.float32, 0.0).passed  # no rounding: the factor alone
    assert rule.compare("out", mine, theirs, ref, torch.float32, 0.0, factor=4.0).passed
    r = rows_of(sdpa, BASIC[:1], factor=3.0)
    assert r.passed and r.factor == 3.0 and r.rows[0].comparisons[0].allowed >= 3 * r.rows[0].comparisons[0].torch_err
    assert "factor set to 3x PyTorch's error, not the default 2x" in verify_summary(r, ["f"])
    assert "factor" not in verify_summary(rows_of(sdpa, BASIC[:1]), ["f"])
    assert [x.status for x in rows_of(unscaled, BASIC, factor=8.0).rows] == ["fail", "fail"]
    assert verify.VerifyResult.from_dict(r.to_dict()).factor == 3.0


def test_the_cli_takes_dtypes_forward_only_and_factor(tmp_path, capsys):
    path = tmp_path / "v.json"
    assert main(["verify", "--impl", "sdpa", "--quick", "--dtypes", "float64,float16", "--only", "basic",
                 "--forward-only", "--factor", "2.5", "--show", "failures", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "factor set to 2.5x" in out and "forward only" in out
    data = json.loads(path.read_text())
    assert {r["dtype"] for r in data["rows"]} == {"float64", "float16"} and data["backward"] is False
    with pytest.raises(SystemExit) as e:
        main(["verify", "--impl", "sdpa", "--factor", "0.5"])
    assert e.value.code == 2 and "give a number >= 1" in capsys.readouterr().err


def test_the_grid_has_the_new_cases_and_quick_leaves_out_the_longest():
    full, quick = default_cases(["float32", "float64", "bfloat16"]), default_cases(long=False)
    names = {c.name for c in quick}
    assert "is_causal with a padding mask (N,1,1,S)" in names
    assert {c.E for c in quick if c.name.startswith("head dim")} >= {64, 128, 256}
    off = [c for c in quick if c.name.startswith("off the tiles")]
    assert off and all(len(c.batch) == 1 and not c.is_causal and c.L % 16 and (c.S or c.L) % 16 for c in off)
    longest = {c.dtype: c.L for c in full if c not in quick}
    assert longest == {"float32": 2049, "float64": 1025, "bfloat16": 4097}


def test_a_function_that_drops_the_padding_mask_under_is_causal_fails_the_new_case():
    def drops(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        return sdpa(q, k, v, None if is_causal else attn_mask, dropout_p, is_causal, scale, enable_gqa)

    case = next(c for c in default_cases(["float32"], long=False) if c.name.startswith("is_causal with a padding"))
    assert rows_of(drops, [case]).rows[0].status == "fail" and rows_of(sdpa, [case]).rows[0].status == "pass"


def test_the_oracle_runs_once_per_case_and_a_float64_twin_takes_its_float32_oracle(monkeypatch):
    calls = []
    real = oracle.forward
    monkeypatch.setattr(oracle, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    case = Case("basic", batch=(1,), H=2, L=24, E=16, mask="bool")
    x = verify.inputs(case, 0)
    judge.expect(case, 0, x, None)
    assert len(calls) == 1
    calls.clear()
    bf = Case("basic", batch=(1,), H=2, L=24, E=16, dtype="bfloat16")
    judge.expect(bf, 0, verify.inputs(bf, 0), None)
    assert len(calls) == 1  # its float64 floor too reads the one forward
    calls.clear()
    twin = replace(case, dtype="float64")
    r = rows_of(sdpa, [case, twin])
    assert r.passed and len(calls) == 1
    f32, f64 = (verify.inputs(c, c.seed(0)) for c in (case, twin))
    assert torch.equal(f32.q.double(), f64.q) and torch.equal(f32.dense, f64.dense)


def test_a_case_draws_its_inputs_from_its_name_whatever_runs_beside_it():
    a, b = Case("basic"), Case("causal", is_causal=True)
    assert a.seed(0) != b.seed(0) and a.seed(1) == a.seed(0) + 1
    one = verify.verify({"sdpa": sdpa}, [a], timeout=None).rows[0].comparisons
    two = verify.verify({"sdpa": sdpa}, [b, a], timeout=None).rows[1].comparisons
    assert [c.err for c in one] == [c.err for c in two]


def test_the_dense_twin_of_every_mask_function_is_what_flex_attentions_create_mask_makes():
    from torch.nn.attention.flex_attention import create_mask

    from attnlab.judge import cases

    for name in [*cases.MASK_FAMILIES, "lower-right"]:
        for batch, H, L, S in [((2,), 2, 29, 29), ((), 3, 17, 23 if name != "document & causal" else 17)]:
            m = attnlab.masks.causal_lower_right() if name == "lower-right" else cases.MASK_FAMILIES[name](S)
            d = create_mask(lambda b, h, i, j, m=m, L=L, S=S: m(b, h, i, j, L, S), math.prod(batch), H, L, S,
                            device="cpu")
            want = d.reshape(*batch, H, L, S) if batch else d[0]
            assert torch.equal(cases._dense_twin(name, batch, H, L, S), want), name


@pytest.mark.slow
def test_rewording_every_message_changes_no_diagnosis(monkeypatch):
    """The diagnoses read facts, never a row's words: with every contract sentence and exception message said
    otherwise, the same causes come out, each with the same count (only the exception's own quoted text moves)."""
    from attnlab.judge import causes as table
    from attnlab.judge import facts

    def several(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if enable_gqa:
            raise ValueError("no grouped heads here")
        out = sdpa(q, k, v, attn_mask, dropout_p, is_causal, 1.0, enable_gqa)  # the scale ignored
        return out.double() if q.shape[-2] == 1 else out  # the wrong dtype for a single query

    cases = [c for c in default_cases(["float32"], long=False) if not c.dropout_p and not c.mod][:60]

    def causes(message):
        def said(q, k, v, **kw):
            try:
                return several(q, k, v, **kw)
            except ValueError:
                raise ValueError(message) from None

        r = verify.verify({"f": said}, cases, timeout=None)
        return [(d.key, d.count) for d in r.diagnoses["f"]], r

    before, r0 = causes("no grouped heads here")
    monkeypatch.setattr(facts, "PROBLEMS", {k: f"[reworded] {v}" for k, v in facts.PROBLEMS.items()})
    after, r1 = causes("grouped query heads are not taken")
    print(before)
    assert before == after and {"unscaled", "dtype", "raises"} <= {k for k, _ in before}, (before, after)
    assert any(r.detail.startswith("[reworded]") for r in r1.rows) and not any("[reworded]" in r.detail
                                                                               for r in r0.rows)
    assert table.table()["dtype"].text in "\n".join(d.text for d in r1.diagnoses["f"])


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_an_api_function_that_raises_on_causal_gets_no_line_about_sdpas_masks_and_one_case_each_way_no_tag():
    """A flash-attn function that refuses causal= by an exception: the exception's line, and none about SDPA's mask
    kinds (an API case passes its mask in its own arguments); a rerun of one case each way names no tag."""
    from attnlab.judge import apis
    from tests import api_functions as A

    def no_causal(q, k, v, causal=False, **kw):
        if causal:
            raise NotImplementedError
        return A.flash_attn_func(q, k, v, causal=causal, **kw)

    cases = apis.cases("flash-attn", ["float32"], long=False)
    r = verify.verify({"f": apis.Adapted(no_causal, "flash-attn")}, cases, check_dropout=False, timeout=None)
    keys = named(r.diagnoses["f"])
    assert sum(row.status == "error" for row in r.rows) >= 5 and keys == ["raises"], keys
    assert "raises NotImplementedError: (no message)" in r.diagnoses["f"][0].text

    two = [Case("basic", batch=(1,), H=2, L=24, E=16), Case("GQA 4/2", batch=(1,), H=4, Hkv=2, L=24, E=16)]
    r = rows_of(lambda q, k, v, **kw: sdpa(q, k, v, **kw) + 0.01 * kw.get("enable_gqa", False), two)
    assert named(r.diagnoses["f"]) == ["unclear"], r.diagnoses["f"]  # one case each way: not "only GQA"
