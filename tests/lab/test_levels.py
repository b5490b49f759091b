"""The lab's levels: named from --level or the function, each starter written and unfinished, and each level's slips
named first by its own diagnosis (tests/lab/level_corpus.py) while its solution gets none and passes."""

from pathlib import Path

import pytest

from attnlab.lab import files, levels
from attnlab.lab.levels import slips
from tests.lab import level_corpus as C


def test_a_level_is_found_by_name_number_or_function_and_an_unknown_one_names_them_all():
    assert levels.find("flash").number == 4 and levels.find("5").name == "backward"
    assert levels.of_function("decode_step").name == "decode" and levels.of_function("my_attention").name == "loops"
    with pytest.raises(levels.NoSuchLevel, match="no level 'fast'; the levels are 1 loops, 2 matrix, 3 module, "
                                                 "4 flash, 5 backward, 6 decode"):
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


def _corpus(levels_, seeds):
    got = C.run(seeds, levels_)
    wrong = [(r["level"], r["slip"], r["seed"], r["named"]) for r in got if not r["right"]]
    assert not wrong, wrong
    assert {r["slip"] for r in got if r["slip"]} == {s for lv in levels_ for s in C.slips(lv)}


def test_matrix_and_flash_slips_are_named_first_at_seeds_0_to_4_and_the_solutions_get_none():
    _corpus(("matrix", "flash"), range(5))


def test_backward_and_decode_slips_are_named_first_and_the_solutions_pass_at_seed_0():
    _corpus(("backward", "decode"), range(1))


@pytest.mark.slow
def test_every_slip_of_every_level_is_named_first_at_seeds_0_to_4():
    _corpus(tuple(C.S.SLIPS), range(5))


def test_every_message_of_every_level_is_held_to_a_mutant_that_produces_it():
    """Each line a level can say has a mutant that makes the level say it first (the corpus above runs them)."""
    said = {s for lv in C.S.SLIPS for s in C.slips(lv)}
    for lv in levels.LEVELS:
        text = getattr(lv.module(), "TEXT", slips.TEXT)
        assert set(text) <= said, (lv.name, set(text) - said)


@pytest.mark.parametrize("level", ["matrix", "flash", "backward", "decode"])
def test_each_starter_as_it_comes_runs_and_fails(tmp_path, level):
    """The starter runs (the learner can check it at once) and gives the wrong answer (it gives nothing away)."""
    from attnlab.judge import loader
    from attnlab.lab import grade

    lv = levels.find(level)
    path = Path(files.start(tmp_path, lv).path)
    fn = loader.load_file(path, lv.function, module_name=f"attnlab_test_starter_{level}")
    if lv.kind == "attention":
        got = slips.outputs(grade.as_sdpa(lv.module().wrap(fn)), 0)
        assert all(o is not None for *_, o in got)  # it runs
        assert any(float((o - C.oracle.reference(q, k, v, is_causal=True)).abs().max()) > 0.1 for _, q, k, v, o in got)
    else:
        rows, *_ = lv.module().judge(lv.module().run(fn, {"seed": 0}), 0)
        assert rows and all(r.status == "fail" for r in rows), [(r.status, r.detail) for r in rows]
