"""The lab's levels: named from --level or the function, each starter written and unfinished, each level's slips
named first by its own diagnosis (tests/lab/level_corpus.py) while its solution gets none and passes, and the
levels built on each other as FlashAttention is (issue 44 §1, §2)."""

import functools
from pathlib import Path

import pytest
import torch

from attnlab.judge import oracle
from attnlab.judge.apart import loader
from attnlab.lab import check, files, levels
from attnlab.lab.levels import backward, decode, decoding, flash, forwards, grads, module, slips, tiles
from tests.lab import level_corpus as C
from tests.lab import level_solutions as S


def test_a_level_is_found_by_name_number_or_function_and_an_unknown_one_names_them_all():
    assert levels.find("flash").number == 4 and levels.find("5").name == "backward"
    assert levels.find("7").name == "triton" and levels.of_function("flash_attention").name == "triton"
    assert levels.of_function("decode_step").name == "decode" and levels.of_function("my_attention").name == "loops"
    with pytest.raises(levels.NoSuchLevel, match="no level 'fast'; the levels are 1 loops, 2 matrix, 3 module, "
                                                 "4 flash, 5 backward, 6 decode, 7 triton"):
        levels.find("fast")


@pytest.mark.parametrize("level", [lv.name for lv in levels.LEVELS])
def test_each_starter_is_written_once_defines_its_function_and_is_told_as_the_starters(tmp_path, level):
    lv = levels.find(level)
    s = files.start(tmp_path, lv)
    text = Path(s.path).read_text()
    assert s.written and Path(s.path).name == lv.filename and lv.function in files.functions_in(text)
    assert "TODO" in text and files.given_text(text, lv.function, lv.starter_text())
    Path(s.path).write_text(text + "\n# mine\n")
    assert not files.start(tmp_path, lv).written and Path(s.path).read_text().endswith("# mine\n")  # never over it


@pytest.mark.parametrize("level, todos", [("loops", 4), ("matrix", 4), ("module", 4), ("flash", 5), ("backward", 4),
                                          ("decode", 3), ("triton", 4)])
def test_an_untouched_starter_is_told_it_is_one_with_its_todos_left_and_nothing_else(level, todos):
    line = slips.starter_line(levels.find(level))
    print(line.text)
    assert line.key == "starter" and line.text.startswith(f"untouched starter: {todos} TODOs left")


@pytest.mark.slow  # each level's check runs its starter in a judged process, as `attnlab lab check` does
@pytest.mark.parametrize("level", [pytest.param(lv.name, marks=[pytest.mark.long] if lv.name in ("loops", "flash")
                                                else []) for lv in levels.LEVELS])  # (loops and flash: 20-70 s)
def test_lab_check_tells_every_untouched_starter_it_is_one_and_nothing_else(tmp_path, level):
    """Through the check itself (the attention levels' and the levels with cases of their own alike): the untouched
    starter's causes are the one untouched line, and no failing row, no slip, no "fit no pattern" is printed."""
    from attnlab.lab import judged
    from attnlab.report import exercise

    lv = levels.find(level)
    path = files.start(tmp_path, lv).path
    with judged.open_learner(str(path)) as learner:
        assert learner.given and learner.level == level
        r = check.check(learner, quick=True, budget_s=30.0)
    said = exercise.lines(r)
    print("\n".join(said))
    starter = slips.starter_line(lv)
    assert [(d.key, d.text) for d in r.diagnoses] == [(starter.key, starter.text)]
    causes = said[said.index("[bold]Likely cause[/] (most likely first):") + 1:]
    assert causes[0] == f"  - {starter.text}" and not causes[1].startswith("  - ")
    assert not any(line.startswith("  [red]") or "fit no pattern" in line for line in said)
    assert not r.passed


def _corpus(levels_, seeds):
    got = C.run(seeds, levels_)
    wrong = [(r["level"], r["slip"], r["seed"], r["named"]) for r in got if not r["right"]]
    assert not wrong, wrong
    assert {r["slip"] for r in got if r["slip"]} == {s for lv in levels_ for s in C.slips(lv)}


@pytest.mark.slow
def test_matrix_and_flash_slips_are_named_first_at_seed_0_and_the_solutions_get_none():
    _corpus(("matrix", "flash"), range(1))  # (every level at seeds 0 to 4: the test below, in make test-long)


@pytest.mark.slow
def test_backward_and_decode_slips_are_named_first_and_the_solutions_pass_at_seed_0():
    _corpus(("backward", "decode"), range(1))


@pytest.mark.long
@pytest.mark.slow
def test_every_slip_of_every_level_is_named_first_at_seeds_0_to_4():
    _corpus(tuple(C.S.SLIPS), range(5))


def _as_learner(level, answer):
    """A learner's function that returns a slip's own answer (what the detector must name as that slip); where the
    slip says nothing of a probe (None), or nothing of the lse, the right answer there."""
    def both(q, k, v, causal):
        got = answer(q, k, v, causal)
        f = oracle.answer(q.double(), k.double(), v.double(), is_causal=causal)[1]
        right = {"out": oracle.unflatten(f.out, f).to(q.dtype), "lse": f.lse.reshape(q.shape[:-1]).to(q.dtype)}
        return {**right, **({"out": got} if isinstance(got, torch.Tensor) else got or {})}

    if level == "flash":
        return lambda q, k, v, c, bq, bk: tuple(both(q, k, v, c)[n] for n in ("out", "lse"))
    return lambda q, k, v: both(q, k, v, True)["out"]


@pytest.mark.slow
@pytest.mark.parametrize("level", ["loops", "matrix", "flash"])
def test_each_slip_an_attention_level_knows_is_named_first_as_itself(level):
    """No slip is shadowed by one before it: a function that gives a slip's own answer is named as that slip (on the
    probes where it answers at all), first; the right answer, as the oracle gives it, is named nothing."""
    from attnlab.judge import verify as V

    lv = levels.find(level)
    mod, wrong = lv.module(), []
    for key, answer in mod.slip_list():
        keys = C.attention_keys(lv, _as_learner(level, answer), 0)
        print(f"{level}: {key} -> {keys[:3]}")
        calm = [answer(*(t.double() for t in (x.q, x.k, x.v)), c.is_causal) for i, c in enumerate(mod.PROBES)
                if c.magnitude <= 1 for x in [V.inputs(c, i)]]
        nan = all(isinstance(a, dict) and not bool(a["out"].isfinite().any()) for a in calm if a is not None)
        if keys[:1] != [getattr(mod, "NAN", key) if nan else key]:  # (NaN everywhere: the level's NaN line says it)
            wrong.append((key, keys))
    assert not wrong, wrong
    right = functools.partial(tiles.forward, block_q=7, block_k=5)
    assert C.attention_keys(lv, _as_learner(level, lambda q, k, v, c: right(q, k, v, c)), 0) == []


def test_the_stale_max_guarded_on_the_first_tile_is_named_from_its_outputs_not_as_an_overflow():
    """p = exp(s - where(m == -inf, m_new, m)): the first tile right, every later one against the old max. Its
    errors are finite on small scores and it overflows on large ones, as the stale max does: the stale-max line,
    not "subtract each row's largest score" (it does subtract one, a stale one)."""
    lv = levels.find("flash")
    keys = C.attention_keys(lv, functools.partial(S.flash_forward, slip="stale-max-guarded"), 0)
    print(keys)
    assert keys[:1] == ["stale-max"] and "max-subtraction" not in keys


# 1.5 to 4 s of CPU where it is the first to read level 7's probes in its worker (cached there), 0.15 s after
@pytest.mark.slow(first="level 7's probes and their float64 answers")
def test_where_a_level_names_its_slip_verify_adds_only_the_lines_that_read_no_numbers():
    """Level 7's kernel with the scores past S unmasked: its line, and of verify's lines only the contract's and
    what was raised -- not a tag the same failing cases share ("fails only in bfloat16"), nor a semantic guess."""
    from attnlab.judge.diagnose import Diagnosis
    from attnlab.lab.levels import triton as T

    lv = levels.find("triton")

    def padded(q, k, v, is_causal, block_m, block_n):  # the kernel's tiles, the zero keys past S scored 0
        got = tiles.forward(q, k, v, is_causal, block_m, block_n, tiles.Slip(pad=True))
        return got["out"], got["lse"]

    got = slips.answers(functools.partial(T.probe_call, padded), T.PROBES, 0)
    verify_said = [Diagnosis("bfloat16", "fails only in bfloat16: keep the softmax's max, sums and accumulator in "
                                         "float32", 1, ["bfloat16"], "bfloat16, full, L<S"),
                   Diagnosis("L!=S", "only cases with L != S fail", 3, ["float32"], "full, L<S"),
                   Diagnosis("unclear", "fails with no single pattern (worst: out: 0.3 > 1e-05)", 2),
                   Diagnosis("raises", "raises ValueError: a message", 1, ["float16"], "noncontig"),
                   Diagnosis("in-place", "changes the caller's tensors in place", 1, ["float32"], "basic")]
    keys = [d.key for d in check.level_diagnoses(got, lv, 0, verify_said)]
    print(keys)
    assert keys == ["pad-keys", "raises", "in-place"]
    assert [d.key for d in check.level_diagnoses([None] * len(T.PROBES), lv, 0, verify_said)] == [
        d.key for d in verify_said]  # no slip named (it raised on every probe): verify's lines, all of them


def test_every_line_a_level_says_is_one_of_its_slips_or_a_fact_it_measures():
    """Each key of a level's TEXT is a slip its list can name, or one of the facts the check reads itself."""
    facts = {"starter", "max-subtraction", "nan-everywhere", "no-skip", "lse-wrong", "lse-dtype", "autograd", "dtype",
             "square-assumed", "lse-half", "float32-in-float64", "softmax-half"}  # (the last three: an lse's bits or
    # its error's direction, forwards.lse_stored)
    for lv in levels.LEVELS:
        mod = lv.module()
        listed = mod.slip_list() if lv.kind == "attention" else mod.slip_list(0)
        known = {key for key, _ in listed} | facts
        extra = set(getattr(mod, "TEXT", slips.TEXT)) - known - set(slips.TEXT)  # attention's lines, shared
        assert not extra, (lv.name, extra)


# backward and decode run the level's whole check: seconds
@pytest.mark.parametrize("level", ["matrix", "flash", *(pytest.param(lv, marks=pytest.mark.slow)
                                                     for lv in ("backward", "decode"))])
def test_each_starter_as_it_comes_runs_and_fails(tmp_path, level):
    """The starter runs (the learner can check it at once) and gives the wrong answer (it gives nothing away)."""
    lv = levels.find(level)
    path = Path(files.start(tmp_path, lv).path)
    fn = loader.load_file(path, lv.function, module_name=f"attnlab_test_starter_{level}")
    mod = lv.module()
    if lv.kind == "attention":
        from attnlab.judge import verify as V
        from attnlab.lab.levels.own import unpack

        got = slips.answers(functools.partial(mod.probe_call, fn), mod.PROBES, 0)
        assert all(o is not None for o in got)  # it runs
        far = []
        for i, (case, o) in enumerate(zip(mod.PROBES, got, strict=True)):
            x = V.inputs(case, i)
            right = oracle.reference(x.q.double(), x.k.double(), x.v.double(), is_causal=case.is_causal)
            far.append(float((unpack(o["out"]).double() - right).abs().max()))
        assert max(far) > 0.1, far  # it gives the wrong answer
    else:
        rows, *_ = mod.judge(mod.run(fn, {"seed": 0}), 0)
        assert rows and all(r.status == "fail" for r in rows), [(r.status, r.detail) for r in rows]


# ---- §2: the levels build on each other as FlashAttention does ----


@pytest.mark.slow
def test_level_4_returns_the_lse_and_the_causal_forward_does_about_half_the_work():
    """The solution's lse passes the judge's lse rule on the level's lse cases; its causal call does 56 % of a full
    call's multiply-adds at T = 512 with 64 x 64 tiles (8 tiles a side: (8 + 1) / 16), counted; without the skip it
    does 100 % and the level names it."""
    ask = functools.partial(flash.run, S.flash_forward)
    rows, found, fill = flash.extra_rows(ask, "flash_forward", 0)
    for r in rows:
        print(r.case, r.status, r.detail, [f"{c.err:.1e}/{c.allowed:.1e}" for c in r.comparisons])
    assert [r.status for r in rows] == ["pass"] * len(rows) and found == []
    assert "did 56% of the full call's multiply-adds" in rows[-1].detail

    def no_skip(q, k, v, is_causal=False, block_q=64, block_k=64):  # the causal mask, every tile computed
        return S.flash_forward(q, k, v, is_causal, block_q, 10 ** 9 if is_causal else block_k)

    rows, found, fill = flash.extra_rows(functools.partial(flash.run, no_skip), "flash_forward", 0)
    print(rows[-1].detail, found, fill)
    assert rows[-1].status == "fail" and "did 100%" in rows[-1].detail and found == ["no-skip"]
    assert "100%" in flash.TEXT["no-skip"].format(**fill)
    bad_lse = functools.partial(S.flash_forward, slip="lse-no-max")
    rows, _, _ = flash.extra_rows(functools.partial(flash.run, bad_lse), "flash_forward", 0)
    assert any(r.status == "fail" for r in rows[:-1])


def test_level_5_is_graded_on_20_cases_or_more_and_takes_level_4s_out_and_lse():
    shapes = [c[1] for c in backward.CASES]
    assert len(backward.CASES) >= 20 and {c[2] for c in backward.CASES} == {True, False}
    assert any(L != S_ for _, _, L, S_, _ in shapes) and any(L == S_ for _, _, L, S_, _ in shapes)
    assert all(L / bq > 2 and S_ / bk > 2 for (_, _, L, S_, _), (bq, bk) in zip(shapes, [c[5] for c in backward.CASES],
                                                                              strict=True))  # three tiles a side
    g = torch.Generator().manual_seed(0)
    for causal, (L, S_) in ((True, (29, 17)), (False, (17, 29)), (True, (24, 24))):
        q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (L, S_, S_))
        dout = torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64)
        out, lse = S.flash_forward(q, k, v, causal, 7, 5)  # level 4's answer, fed to level 5
        dq, dk, dv = S.flash_backward(q, k, v, out, lse, dout, causal, 7, 5)
        ref = oracle.reference(q, k, v, is_causal=causal, grad_out=dout)
        errs = [float((a - b).abs().max()) for a, b in zip((dq, dk, dv), ref[1:], strict=True)]
        print(causal, L, S_, errs)
        assert max(errs) < 1e-12


@pytest.mark.slow  # 1.5 to 4 s of CPU: near the fast bound, over it on a slower run
def test_level_6_says_which_step_first_goes_wrong_and_has_a_prompt_offset_case():
    assert any(P > 0 for *_, P in decode.CASES) and any(P == 0 for *_, P in decode.CASES)
    rows, found, _, _ = decode.judge(decode.run(functools.partial(S.decode_step, slip="rope-offset"), {"seed": 0}), 0)
    for r in rows:
        print(r.case, r.status, r.detail)
    # turned one position on, q and k alike: among the new tokens it cancels, against the prompt it does not
    assert [r.status for r in rows] == ["pass" if P == 0 else "fail" for *_, P in decode.CASES]
    assert [d.key for d in found][:1] == ["rope-offset"]
    assert all("first step that goes wrong is step 1 (position" in r.detail for r in rows if r.status == "fail")
    rows, found, _, _ = decode.judge(decode.run(functools.partial(S.decode_step, slip="sdpa-causal"), {"seed": 0}), 0)
    assert [d.key for d in found][:1] == ["sdpa-causal"] and "step 2 (position 1)" in rows[0].detail


def test_the_growth_each_level_asks_is_on_the_level_and_the_page_reads_it_there():
    from attnlab.report.lesson import levels as page

    asked = {lv.name: lv.growth for lv in levels.LEVELS}
    assert asked["matrix"].holds(2.1) and not asked["matrix"].holds(1.6) and asked["flash"].holds(1.1)
    assert not asked["flash"].holds(1.3) and asked["loops"] is None and asked["triton"] is None
    assert not hasattr(page, "GROWTH")  # one home: the level


# ---- issue 43 §4: facts where strings were, the module on the rule ----


def test_a_backward_that_asks_autograd_is_told_so_from_where_it_raised_not_from_its_message():
    reply = backward.run(S.autograd_backward, {"seed": 0, "case": 0})
    assert reply["cases"][0]["autograd"] is True

    def says_grad(*args):  # an error that speaks of gradients, raised by the learner's own code
        raise RuntimeError("my grad is not ready")

    assert backward.run(says_grad, {"seed": 0, "case": 0})["cases"][0]["autograd"] is False


@pytest.mark.slow  # 1.5 to 4 s of CPU: near the fast bound, over it on a slower run
def test_the_module_is_held_to_the_rules_floor(monkeypatch):
    """The module level's limits come from attnlab.judge.rule (the attention's rounding floor, carried through the
    projections), not from a tolerance of its own; the solution passes them with room, a slip does not."""
    calls = []
    floor = module.rule.rounding_floor
    monkeypatch.setattr(module.rule, "rounding_floor", lambda *a, **k: calls.append(1) or floor(*a, **k))
    keys, passed = C.own_keys(levels.find("module"), S.causal_self_attention(None), 0)
    assert passed and keys == [] and calls
    keys, passed = C.own_keys(levels.find("module"), S.causal_self_attention("merge-view"), 0)
    assert not passed and keys[:1] == ["merge-view"]


def test_the_slip_simulators_are_right_with_no_slip():
    """tiles.forward, grads.tiled and decoding.decode64 with every step right are attention (against the oracle)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (19, 23, 23))
    for causal in (True, False):
        got = tiles.forward(q, k, v, causal, 6, 5)
        f = oracle.answer(q, k, v, is_causal=causal)[1]
        assert float((got["out"] - oracle.unflatten(f.out, f)).abs().max()) < 1e-12
        assert float((got["lse"] - f.lse.reshape(1, 2, 19)).abs().max()) < 1e-12
        dout = torch.randn(1, 2, 19, 8, generator=g, dtype=torch.float64)
        out, lse = grads.forward64(q, k, v, causal)
        ours = grads.tiled(q, k, v, out, lse, dout, causal, 6, 5)
        ref = oracle.reference(q, k, v, is_causal=causal, grad_out=dout)
        assert max(float((ours[n] - r).abs().max()) for n, r in zip(("dq", "dk", "dv"), ref[1:], strict=True)) < 1e-12
    q, k, v = (torch.randn(1, 2, 12, 8, generator=g, dtype=torch.float64) for _ in range(3))
    qr, kr, v = decode.rotated(q, k, v)
    assert float((decoding.decode64(q, k, v, 5, 2) - oracle.reference(qr, kr, v, is_causal=True)[..., 5:, :])
                 .abs().max()) < 1e-12
    assert forwards.answerable(levels.find("flash").module().PROBES[0])


@pytest.mark.parametrize(("level", "says"), [("loops", "attention_by_hand has four TODOs (the scale"),
                                             ("module", "CausalSelfAttention has its TODOs,"),
                                             ("7", "attention_kernel has its TODOs,")])
def test_lab_start_names_the_function_that_holds_the_todos(tmp_path, capsys, level, says):
    """Level 7's TODOs are in its kernel; its wrapper, flash_attention, is given (it was named as the TODOs')."""
    from attnlab.cli import main

    assert main(["lab", "start", str(tmp_path), "--level", level]) == 0
    out = " ".join(capsys.readouterr().out.split())
    print(out)
    assert f"Open it: {says}" in out and "flash_attention has" not in out


@pytest.mark.slow  # the file is loaded in a judged process
def test_a_file_saved_with_a_byte_order_mark_is_read_as_its_code(tmp_path):
    """Editors on Windows write a UTF-8 BOM first: the file is its code (it was refused as "has no function
    'attention_by_hand'": the level was guessed from a source the parser refused)."""
    from attnlab.lab import judged

    lv = levels.find("matrix")
    path = files.start(tmp_path, lv).path
    Path(path).write_bytes(b"\xef\xbb\xbf" + Path(path).read_bytes())
    with judged.open_learner(str(path)) as learner:
        assert (learner.name, learner.level, learner.given) == ("attention_matrix", "matrix", True)
        assert "attention_matrix" in learner.functions
