"""A reproducer for each cause (issue 42 §6): each cause's failing case shrinks to a smaller one that still fails the
same way (the hint still holds), and ``verify --repro DIR`` writes a standalone script per cause that prints the
judge's own error on that case above its limit -- and below it once the bug is fixed -- for SDPA's API and the
others."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.judge import repro, verify
from attnlab.judge.cases import default_cases

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("basic", "GQA 6/2 causal", "bool mask", "transposed views, mask bool", "is_causal with a padding mask "
         "(N,1,1,S)", "sliced last dim, float mask")
CASES = [c for c in default_cases(["float32"], long=False) if c.name in NAMES]

KERNEL = '''import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

BUGS = {bugs!r}


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if "assert-bool" in BUGS:
        assert attn_mask is None or attn_mask.dtype != torch.bool
    if "value-float" in BUGS and attn_mask is not None and attn_mask.is_floating_point():
        raise ValueError("float masks are not taken here")
    if "mask-in-place" in BUGS and attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask.logical_not_()  # read backwards, and the caller's mask with it
    if "mask" in BUGS and attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = ~attn_mask  # read backwards
    if "gqa" in BUGS and enable_gqa and k.shape[-3] != q.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v, enable_gqa = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1), False  # repeat, not repeat_interleave
    if "in-place" in BUGS and torch.is_inference_mode_enabled():
        v.mul_(2.0)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                              scale=scale, enable_gqa=enable_gqa)

    if "checkpoint" in BUGS and q.requires_grad:  # reentrant: its backward takes .backward(), not autograd.grad
        out = checkpoint(sdpa, q, k, v, use_reentrant=True)
    else:
        out = sdpa(q, k, v)
    if "float64-off" in BUGS and q.dtype == torch.float64:
        out = out + 0.01
    if ("plain-off" in BUGS and q.dtype == torch.float32 and attn_mask is None and not is_causal
            and q.shape[-2] == k.shape[-2]):
        out = out + 0.01
    return out
'''


def _kernel(folder: Path, bugs: set, monkeypatch):
    """The kernel module written to ``folder`` with ``bugs``, imported afresh (no bytecode: a rewrite of the same
    size in the same second must not run the old code)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (folder / "mykernel.py").write_text(KERNEL.format(bugs=sorted(bugs)))
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("mykernel", None)
    import mykernel

    return mykernel.attention


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


RUN_ALL = """import contextlib, io, json, runpy, sys
out = {}
for path in sys.argv[1:]:
    buf, code = io.StringIO(), 0
    with contextlib.redirect_stdout(buf):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:
            code = e.code
    out[path] = [code, buf.getvalue()]
print(json.dumps(out))
"""


def _run_all(scripts: list[str], cwd: Path) -> dict:
    """{script: (exit code, what it printed)}: each run as a script (``__main__``), all in one process of their
    own (torch imported once)."""
    import json

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    got = subprocess.run([sys.executable, "-c", RUN_ALL, *scripts], capture_output=True, text=True, timeout=300,
                         cwd=cwd, env=env)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.splitlines()[-1])


def _printed(text: str) -> dict:
    """{quantity: (error, limit, over)} from a script's lines."""
    out = {}
    for m in re.finditer(r"^\s*(\S.*?): max\|yours - PyTorch\(float64\)\| = (\S+)\s+limit (\S+)\s+(OVER|ok)$", text,
                         re.M):
        out[m[1]] = (float(m[2]), float(m[3]), m[4] == "OVER")
    return out


@pytest.mark.slow  # the grid's cases and some thirty smaller ones judged
def test_each_cause_shrinks_to_a_smaller_case_that_still_fails_the_same_way(tmp_path, monkeypatch):
    fn = _kernel(tmp_path, {"gqa", "mask"}, monkeypatch)
    r = verify.verify({"mykernel:attention": fn}, CASES, timeout=None)
    reps = repro.reproduce(fn, "mykernel:attention", r, CASES, repro.Judging(timeout=None), seconds=math.inf)
    by = {x.cause: x for x in reps}
    assert {"gqa", "mask-inverted"} <= set(by), [(d.key, d.text) for d in r.diagnoses["mykernel:attention"]]
    for rep in reps:
        grid, small = rep.grid, rep.smallest
        work = lambda s: max(1, *s["batch"]) * s["H"] * s["L"] * s["S"] * s["E"]  # noqa: E731
        print(rep.cause, rep.line())
        assert work(small) < work(grid) and rep.tries > 0, rep
    gqa = by["gqa"].smallest
    assert gqa["H"] // gqa["Hkv"] >= 2 and gqa["Hkv"] >= 2, gqa  # below that repeat and repeat_interleave agree
    # the smallest case, judged again, still carries the hint the cause came from
    case = next(c for c in CASES if f"{c.name!r} [{c.dtype}]" == by["gqa"].case)
    small = repro._resized(repro._resized(case, "L", gqa["L"]), "E", gqa["E"])
    row = verify.check_case("k", fn, small, small.seed(0), False, False)
    assert row.status == "fail" and "gqa-repeat" in map(str, row.hints), row.hints


@pytest.mark.slow  # runs the scripts in processes of their own
def test_the_scripts_print_the_judges_error_over_the_limit_and_pass_once_the_bug_is_fixed(tmp_path, monkeypatch):
    fn = _kernel(tmp_path, {"gqa", "mask", "in-place"}, monkeypatch)
    r = verify.verify({"mykernel:attention": fn}, CASES, timeout=None)
    folder = tmp_path / "repro"
    folder.mkdir()
    reps = repro.reproduce(fn, "mykernel:attention", r, CASES, repro.Judging(timeout=None),
                           spec="mykernel:attention", folder=folder)
    scripts = {x.cause: x for x in reps if x.script}
    assert {"gqa", "mask-inverted", "inference-mode-in-place"} <= set(scripts), [(x.cause, x.why) for x in reps]
    runs = _run_all([x.script for x in scripts.values()], tmp_path)
    for cause, rep in scripts.items():
        assert Path(rep.script).name == f"repro_{cause.replace('-', '_')}.py"
        imported = re.findall(r"^(?:import|from) (\S+)", Path(rep.script).read_text(), re.M)
        assert imported and not any(m.startswith("attnlab") for m in imported), imported  # torch and the function
        code, text = runs[rep.script]
        print(cause, text)
        assert code == 1 and "FAILS" in text
        printed = _printed(text)
        for quantity, (err, _) in rep.errors.items():  # the judge's own numbers, on the same inputs
            if quantity in printed and err != float("inf"):
                assert printed[quantity][2] and printed[quantity][0] == pytest.approx(err, rel=1e-3), (quantity, err)
        if cause == "inference-mode-in-place":
            assert "under torch.inference_mode(): changed its input argument 3 in place" in text
    _kernel(tmp_path, set(), monkeypatch)  # the bugs fixed
    runs = _run_all([x.script for x in scripts.values()], tmp_path)
    for rep in scripts.values():
        code, text = runs[rep.script]
        printed = _printed(text)
        assert code == 0 and "passes" in text, (rep.cause, text)
        assert printed and not any(over for _, _, over in printed.values()), printed


API_BUGS = '''from tests import api_functions as A

BUGGY = {buggy!r}
flash = A.flash_top_left if BUGGY else A.flash_attn_func
varlen = A.varlen_shifted if BUGGY else A.flash_attn_varlen_func
paged = A.paged_in_order if BUGGY else A.paged_decode


def flex(query, key, value, **kw):
    return A.flex_attention(query, key, value, **kw, _ignore_mask=BUGGY)
'''


@pytest.mark.long  # 10 s and more each: the API's cases, shrinking, two runs of the script
@pytest.mark.slow
@pytest.mark.parametrize("api, name, only", [
    ("flash-attn", "flash", "L=1 decode lower-right"),
    ("flash-attn-varlen", "varlen", "varlen: causal, 5, 17"),
    ("paged-decode", "paged", "paged: 3 sequences"),
    ("flex", "flex", "mask fn: causal_lower_right"),
])
def test_an_apis_script_calls_it_in_its_own_layout_and_arguments(api, name, only, tmp_path, monkeypatch):
    from attnlab.judge import apis

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "apikernels.py").write_text(API_BUGS.format(buggy=True))
    sys.modules.pop("apikernels", None)
    import apikernels

    cases = [c for c in apis.cases(api, ["float32"], long=False) if c.name.startswith(only)][:1]
    fn = apis.Adapted(getattr(apikernels, name), api)
    r = verify.verify({f"apikernels:{name}": fn}, cases, timeout=None, check_dropout=False)
    reps = repro.reproduce(fn, f"apikernels:{name}", r, cases, repro.Judging(timeout=None), spec=f"apikernels:{name}",
                           api=api, folder=tmp_path)
    assert reps and all(x.script for x in reps), [(x.cause, x.why) for x in reps]
    for rep in reps:
        got = _run(rep.script, tmp_path)
        print(rep.line(), got.stdout, got.stderr[-2000:])
        printed = _printed(got.stdout)
        assert got.returncode == 1 and printed["out"][2], got.stdout
        assert printed["out"][0] == pytest.approx(rep.errors["out"][0], rel=1e-3)
    (tmp_path / "apikernels.py").write_text(API_BUGS.format(buggy=False))
    for rep in reps:
        got = _run(rep.script, tmp_path)
        assert got.returncode == 0, (got.stdout, got.stderr[-2000:])
        assert "lse" in _printed(got.stdout) or api == "sdpa"


@pytest.mark.slow  # verify --impl: a judged process of its own
def test_verify_repro_writes_a_script_per_cause_and_the_report_names_it(tmp_path, monkeypatch, capsys):
    _kernel(tmp_path, {"gqa"}, monkeypatch)
    monkeypatch.chdir(tmp_path)
    code = main(["verify", "--impl", "mykernel:attention", "--quick", "--dtypes", "float32", "--only", "GQA 6/2",
                 "--repro", "out/repro"])
    text = capsys.readouterr().out
    print(text)
    assert code == 1 and (tmp_path / "out/repro/repro_gqa.py").is_file()
    assert "smallest: 'GQA 6/2 causal' [float32] at" in text and "reproducer: out/repro/repro_gqa.py" in text


@pytest.mark.slow  # verify --impl: a judged process of its own
def test_a_repro_folder_on_a_full_disk_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """The script could not be written: said as the command's one line, as for any folder it cannot write (it was
    "no script: it could not be made: CannotWrite" inside the diagnosis, and exit 1)."""
    from tests.helpers import full_device

    _kernel(tmp_path, {"gqa"}, monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "repro").mkdir()
    (tmp_path / "repro" / "repro_gqa.py.tmp").symlink_to(full_device(tmp_path))
    code = main(["verify", "--impl", "mykernel:attention", "--quick", "--dtypes", "float32", "--only", "GQA 6/2",
                 "--repro", "repro"])
    out, err = capsys.readouterr()
    print(out[-2000:], err)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and "could not be made" not in out
    assert err.startswith("attnlab verify: error: cannot write repro/repro_gqa.py: No space left on device")
    assert not (tmp_path / "repro" / "repro_gqa.py").exists()


def test_a_repro_folder_that_cannot_be_one_is_refused_before_anything_runs(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    assert main(["verify", "--impl", "matrix", "--repro", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--repro" in err and "is a file, not a folder" in err, err


def test_every_layout_of_the_grid_has_its_lines_in_the_script():
    from attnlab.judge import repro_script
    from attnlab.judge.cases import LAYOUTS

    assert set(repro_script.LAYOUT_CODE) == {None, *LAYOUTS}


def test_a_case_too_big_to_write_out_gets_no_script_and_says_why():
    from attnlab.judge import judge, repro_script
    from attnlab.judge.cases import Case

    case = Case("a big bool mask", batch=(2,), H=4, L=200, S=300, E=8, mask="bool")  # 480,000 mask values
    x = verify.inputs(case, 0)
    exp = judge.expect(case, 0, x, None)
    row = judge.judge("f", torch.nn.functional.scaled_dot_product_attention, case, 0, x, exp, False)
    with pytest.raises(repro_script.NoScript, match="too many to write out"):
        repro_script.write(Path("unused.py"), spec="m:f", api="sdpa", cause="c", text="t", case=case, seed=0,
                           device="cpu", row=row, x=x, exp=exp, grid="", smallest="")


def test_a_hint_that_ties_two_readings_is_the_same_way_for_either_of_their_causes():
    from attnlab.judge.judge import Row

    def row(*hints):
        return Row("f", "c", "float32", "fail", tags=["causal", "float32"], hints=list(hints))

    tied = row("causal-ignored|causal-dropped-with-mask")  # which one verify says is settled by the other cases
    for key, alone, other in (("causal-ignored", "causal-ignored", "causal-dropped-with-mask"),
                              ("causal+mask", "causal-dropped-with-mask", "causal-ignored")):
        same = repro.same_way(tied, key, "f")
        assert same(row("causal-ignored|causal-dropped-with-mask")) and same(row(alone)), key
        assert not same(row(other)) and not same(row("unscaled")), key  # the other reading alone is another cause
        assert not same(Row("f", "c", "float32", "pass", tags=["causal"]))


def _reproduced(tmp_path, monkeypatch, bugs: set, cases, folder=None):
    """(verify's result, the reproducers) for the kernel with ``bugs`` on ``cases``, scripts in ``folder``."""
    fn = _kernel(tmp_path, bugs, monkeypatch)
    r = verify.verify({"mykernel:attention": fn}, cases, timeout=None)
    reps = repro.reproduce(fn, "mykernel:attention", r, cases, repro.Judging(timeout=None), spec="mykernel:attention",
                           folder=folder)
    return r, reps


@pytest.mark.long  # a script per exception type, each run
@pytest.mark.slow  # the grid's cases, shrinking, the scripts in a process of their own twice
def test_each_exception_type_gets_its_own_smallest_case_and_script_which_raises_it(tmp_path, monkeypatch):
    from attnlab.report.terminal import diagnosis_lines

    folder = tmp_path / "repro"
    r, reps = _reproduced(tmp_path, monkeypatch, {"assert-bool", "value-float"}, CASES, folder)
    rows = {f"{row.case!r} [{row.dtype}]": row for row in r.rows}
    raised = {f"raises {rows[x.case].facts.raised_type}": x for x in reps if x.cause == "raises"}
    assert set(raised) == {"raises AssertionError", "raises ValueError"}, [(x.cause, x.line()) for x in reps]
    for kind, rep in raised.items():  # each from a case that raises that type, to a script named for it
        assert Path(rep.script).name == f"repro_{kind.replace(' ', '_')}.py", rep.script
        assert rep.shows.startswith(kind), rep.shows  # and the smallest case still raises it
    text = "\n".join(diagnosis_lines(repro.Reproduced.of_result(r, {"mykernel:attention": reps}))).splitlines()
    print("\n".join(text))
    for kind, rep in raised.items():  # under each line, its own smallest case and script
        line = next(i for i, t in enumerate(text) if t.startswith(f"  - {kind}"))
        assert f"; {kind}" in text[line + 1] and rep.script in text[line + 1], text[line + 1]
    scripts = [x.script for x in raised.values()]
    for script, kind in zip(scripts, raised, strict=True):  # the exception said, no traceback, exit 1
        got = _run(script, tmp_path)
        print(got.stdout, got.stderr[-2000:])
        assert got.returncode == 1 and f"called with gradients: {kind}" in got.stdout and not got.stderr, got
    _kernel(tmp_path, set(), monkeypatch)  # fixed: held to the limits the rule sets on that case, and within them
    for script, (_, text) in _run_all(scripts, tmp_path).items():
        printed = _printed(text)
        assert {"out", "dq", "dk", "dv", "out (no_grad)", "out (inference_mode)"} <= set(printed), (script, text)
        assert "passes" in text and not any(over for _, _, over in printed.values()), text


@pytest.mark.slow  # two dtypes of six cases, and shrinking
def test_the_no_single_pattern_line_is_shrunk_from_its_own_rows(tmp_path, monkeypatch):
    names = {"basic", "two batch dims", "L=1", "bool mask", "causal", "float mask"}
    cases = [c for c in default_cases(["float32", "float64"], long=False) if c.name in names]
    r, reps = _reproduced(tmp_path, monkeypatch, {"float64-off", "plain-off"}, cases)
    found = {d.key: d for d in r.diagnoses["mykernel:attention"]}
    assert set(found) == {"float64", "unclear"} and found["unclear"].dtypes == ["float32"], found
    unclear = next(x for x in reps if x.cause == "unclear")
    print(unclear.line())
    # its rows are the float32 cases without a mask or causality (the float64 rows are "fails only in float64")
    assert unclear.case in ("'basic' [float32]", "'two batch dims' [float32]"), unclear.line()
    assert unclear.errors["out"][0] == pytest.approx(0.01, rel=1e-3), unclear.errors


@pytest.mark.slow  # two cases and shrinking
def test_a_contract_causes_smallest_case_says_the_contract_problem(tmp_path, monkeypatch):
    cases = [c for c in CASES if c.name in ("basic", "bool mask")]
    r, reps = _reproduced(tmp_path, monkeypatch, {"mask-in-place"}, cases)
    by = {x.cause: x for x in reps}
    assert {"in-place", "mask-inverted"} <= set(by), [(d.key, d.text) for d in r.diagnoses["mykernel:attention"]]
    line = by["in-place"].line()
    print(line)
    assert "; changed its input attn_mask in place" in line and " off by " not in line, line
    assert " off by " in by["mask-inverted"].line()  # the wrong semantics: its error


@pytest.mark.long  # a script run with a function that refuses autograd.grad
@pytest.mark.slow  # runs the script in a process of its own, twice
def test_a_script_takes_the_gradients_by_backward_where_autograd_grad_is_refused(tmp_path, monkeypatch):
    cases = [c for c in CASES if c.name in ("basic", "bool mask")]
    _, reps = _reproduced(tmp_path, monkeypatch, {"checkpoint", "mask"}, cases, tmp_path / "repro")
    rep = next(x for x in reps if x.cause == "mask-inverted")
    got = _run(rep.script, tmp_path)
    print(got.stdout, got.stderr[-2000:])
    printed = _printed(got.stdout)
    assert got.returncode == 1 and not got.stderr and {"dq", "dk", "dv"} <= set(printed), got
    assert printed["dv"][2] and printed["dv"][0] == pytest.approx(rep.errors["dv"][0], rel=1e-3), printed
    _kernel(tmp_path, {"checkpoint"}, monkeypatch)  # the mask fixed, the checkpointing kept
    got = _run(rep.script, tmp_path)
    assert got.returncode == 0 and "passes" in got.stdout and not got.stderr, got
