"""The one table of causes and slips (attnlab.judge.registry): every entry has words for its reader, a detector,
and a fixture a test names first.

Where an entry's fixture lives: the judge's causes in tests/judge/cause_fixtures.py (named first by
tests/judge/test_cause_table.py), each lab slip as its own wrong answer in the level's slip list (named first by
tests/lab/test_levels.py, every level at five seeds in make test-long), and the lab's measured facts here (LEVEL) or in
the test named in ELSEWHERE. A key added to either side without a fixture fails here.
"""

import ast
import functools
from pathlib import Path

import pytest
import torch

from attnlab.judge import causes, registry
from attnlab.lab import levels
from attnlab.lab.levels import flash, forwards, slips, triton
from tests.judge.cause_fixtures import FIXTURES, NO_FUNCTION
from tests.lab import level_corpus as C
from tests.lab import level_solutions as S

ROOT = Path(__file__).resolve().parents[2]


def _nan(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Level 4: NaN on every row, also on small scores."""
    return torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), dtype=q.dtype), \
        torch.full(q.shape[:-1], float("nan"), dtype=q.dtype)


def _square(q, k, v):
    """Level 2 written for L = S: the causal mask is (L, L), so it answers only where queries and keys are as many."""
    L = q.shape[-2]
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _lse_half(q, k, v, is_causal=False, block_q=64, block_k=64):
    """Level 4 with its lse returned in the inputs' dtype (the output right)."""
    out, lse = S.flash_forward(q, k, v, is_causal, block_q, block_k)
    return out, lse.to(q.dtype)


def nan_everywhere():
    return C.attention_keys(levels.find("flash"), _nan, 0)


def square_assumed():
    return C.attention_keys(levels.find("matrix"), _square, 0)


def lse_dtype():
    half = functools.partial(flash.run, _lse_half)
    return flash.extra_rows(lambda h: half({**h, "what": "lse"}) if h["what"] == "lse" else
                            flash.run(S.flash_forward, h), "flash_forward", 0)[1]


def lse_wrong():
    def shifted(q, k, v, c):  # level 7's lse off by a constant that is no slip's
        out, lse = S.flash_forward(q, k, v, c.is_causal)
        return lse + 0.3

    return triton.extra_rows(lambda h: forwards.lse_values(shifted, triton.LSE_CASES, h["seed"]), "k", 0)[1]


def autograd():
    return C.own_keys(levels.find("backward"), S.autograd_backward, 0)[0]


LEVEL = {"nan-everywhere": nan_everywhere, "square-assumed": square_assumed, "lse-dtype": lse_dtype,
         "lse-wrong": lse_wrong, "autograd": autograd}
ELSEWHERE = {  # key -> the test that names it first, on a function of its own
    "measured:overflow": "tests/lab/test_overflow_line.py::"
                         "test_a_max_not_carried_overflows_too_and_is_told_what_was_measured_not_a_cause",
    "no-skip": "tests/lab/test_levels.py::test_level_4_returns_the_lse_and_the_causal_forward_does_about_half_the_work",
    "starter": "tests/lab/test_levels.py::"
               "test_an_untouched_starter_is_told_it_is_one_with_its_todos_left_and_nothing_else",
}


def _fixture_of(e: registry.Entry) -> list[str]:
    where = []
    if e.author is not None and e.key in FIXTURES:
        where.append("tests/judge/cause_fixtures.py")
    if e.author is not None and e.key in NO_FUNCTION:
        where.append(NO_FUNCTION[e.key] if isinstance(NO_FUNCTION, dict) else "no function can have it")
    if e.levels:
        where.append(f"the slip lists of {', '.join(e.levels)}")
    if e.key in LEVEL:
        where.append("tests/judge/test_registry.py")
    if e.key in ELSEWHERE:
        where.append(ELSEWHERE[e.key])
    return where


def test_every_entry_has_its_readers_words_a_detector_and_a_fixture():
    table = registry.table()
    assert set(causes.table()) <= set(table)
    for lv in levels.LEVELS:
        assert set(getattr(lv.module(), "TEXT", slips.TEXT)) <= set(table), lv.name
    bare = [k for k, e in table.items() if not (e.author or e.learner) or not e.detectors]
    unfixed = [k for k, e in table.items() if not _fixture_of(e)]
    print(len(table), "entries;", sum(bool(e.author and e.learner) for e in table.values()), "with both words")
    assert not bare and not unfixed, (bare, unfixed)
    judged = [k for k, e in table.items() if e.author is not None]  # the judge's side: a fixture or a reason
    assert all(k in FIXTURES or k in NO_FUNCTION for k in judged), [k for k in judged
                                                                       if k not in FIXTURES and k not in NO_FUNCTION]


def test_the_tests_named_for_a_fixture_exist():
    for key, where in ELSEWHERE.items():
        path, name = where.split("::")
        defined = {n.name for n in ast.walk(ast.parse((ROOT / path).read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in defined, (key, where)
        assert f'"{key}"' in (ROOT / path).read_text(), (key, where)  # and it speaks of the key


def test_the_detectors_are_those_the_notes_list_and_the_table_prints_as_rows():
    kinds = {"contract", "process", "semantics", "tags", "precision", "shared", "slip", "level"}
    table = registry.table()
    assert {d for e in table.values() for d in e.detectors} == kinds
    assert table["unscaled"].detectors == ("semantics", "slip") and table["unscaled"].author and \
        table["unscaled"].learner["matrix"].startswith("your scores are not scaled")
    assert table["shape"].detectors == ("contract",) and table["nan-everywhere"].detectors == ("level",)
    assert table["precision-unplaced"].detectors == ("shared",) and "raises" in registry.NAMES_NOTHING
    rows = registry.rows()
    assert len(rows) == len(table) and all(len(r) == 4 for r in rows)


@pytest.mark.parametrize("key", list(LEVEL))
def test_each_fact_a_level_measures_is_named_first_on_its_fixture(key):
    found = LEVEL[key]()
    print(key, found)
    assert found[:1] == [key], found


def test_verify_causes_prints_the_table_and_writes_it_as_json(tmp_path, capsys):
    import json

    from attnlab.cli import main

    assert main(["verify", "--causes", "--json", str(tmp_path / "causes.json")]) == 0
    out = capsys.readouterr().out
    assert "unscaled  [semantics, slip]" in out and "    learner: your scores are not scaled" in out
    assert f"{len(registry.table())} keys" in out
    rows = json.loads((tmp_path / "causes.json").read_text())
    assert {r["key"] for r in rows} == set(registry.table()) and all(r["detectors"] for r in rows)
