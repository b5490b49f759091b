"""A cause read where the rows cannot tell readings apart (large logits; a log-sum-exp that alone fails) only joins a
line the function's other cases name: it never makes a line of its own, and among a tie's readings only the named
ones count."""

from types import SimpleNamespace

from attnlab.judge.diagnose import diagnose
from attnlab.judge.judge import Row


def _lines(*hints):
    rows = [Row("f", f"case {i}", "float32", "fail", tags=["basic"], hints=list(h)) for i, h in enumerate(hints)]
    rows.append(Row("f", "passing", "float32", "pass", tags=["basic"]))
    return {d.key: d.count for d in diagnose(SimpleNamespace(rows=rows), "f")}


def test_a_supporting_hint_joins_the_line_other_cases_name():
    assert _lines(["gqa"], ["gqa"], ["~gqa"]) == {"gqa": 3}


def test_a_supporting_hint_alone_makes_no_line():
    lines = _lines(["gqa"], ["~tail-dropped"])
    assert lines == {"gqa": 1, "unclear": 1}, lines


def test_a_supporting_tie_counts_only_its_named_reading():
    lines = _lines(["flex-block-size|tail-dropped"], ["flex-block-size"], ["~flex-block-size|tail-dropped"],
                   ["~flex-block-size", "~tail-dropped"])
    assert lines == {"flex-block-size": 4}, lines
