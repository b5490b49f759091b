"""The blind corpora's grader (tests/unseen/grade.py): a line that names a bug the file does not have is false, a
correct file failed is counted, and --check fails a run under the bars."""

import pytest

from tests.unseen import grade


def _row(name, kind, failed, *keys, api="sdpa"):
    return {"name": name, "api": api, "kind": kind, "failed": failed, "lines": [[k, ""] for k in keys]}


TABLE = {"sdpa/a": [("unscaled",)], "sdpa/b": [("diagonal",), ("gqa",)], "sdpa/ok": []}


def test_a_run_that_names_each_bug_first_and_says_nothing_false_meets_the_bars():
    rows = [_row("sdpa/a", "semantic", True, "unscaled", "bfloat16"), _row("sdpa/b", "two", True, "gqa", "diagonal"),
            _row("sdpa/ok", "correct", False)]
    g = grade.grade(rows, TABLE, {})
    assert [x["verdict"] for x in g] == ["named first", "all named", "right"]
    assert grade.shortfalls(g, TABLE) == []


def test_a_false_line_a_bug_not_first_and_a_correct_file_failed_are_each_a_shortfall():
    rows = [_row("sdpa/a", "semantic", True, "mask-zero", "unscaled"), _row("sdpa/b", "two", True, "gqa"),
            _row("sdpa/ok", "correct", True, "unclear")]
    g = grade.grade(rows, TABLE, {})
    print(g)
    assert [x["verdict"] for x in g] == ["not first", "not all named", "FAILED A RIGHT ONE"]
    short = grade.shortfalls(g, TABLE)
    print(short)
    assert "false line in sdpa/a: mask-zero" in short and "a correct file failed: sdpa/ok" in short
    assert any(s.startswith("semantic: 0 of 1 named") for s in short)
    assert any(s.startswith("two: 0 of 1") for s in short)
    assert "a label for sdpa/ok, which the run did not judge" in grade.shortfalls(g[:2], TABLE)


@pytest.mark.slow  # over 0.3 s of CPU in two runs of make test (tests/costs.py)
def test_every_file_of_each_corpus_has_its_labels_and_each_label_its_file():
    from tests.unseen import labels as L
    from tests.unseen import run

    for corpus, table, folder in (("dev", L.DEV, "kernels"), ("dev", L.DEV_SLIPS, "slips"),
                                  ("held", L.HELD, "kernels"), ("held", L.HELD_SLIPS, "slips"),
                                  ("held2", L.HELD2, "kernels"), ("held2", L.HELD2_SLIPS, "slips"),
                                  ("held3", L.HELD3, "kernels"), ("held3", L.HELD3_SLIPS, "slips"),
                                  ("held4", L.HELD4, "kernels"), ("held4", L.HELD4_SLIPS, "slips"),
                                  ("held5", L.HELD5, "kernels"), ("held5", L.HELD5_SLIPS, "slips"),
                                  ("held6", L.HELD6, "kernels"), ("held6", L.HELD6_SLIPS, "slips"),
                                  ("held7", L.HELD7, "kernels"), ("held7", L.HELD7_SLIPS, "slips")):
        kinds = {f"{p.parent.name}/{p.stem}": run.truth(p)["kind"] for p in (run.HERE / corpus / folder).glob("*/*.py")
                 if p.stem != "__init__"}
        wrong = {n for n, k in kinds.items() if k != "correct"}
        assert wrong <= set(table) <= set(kinds), (corpus, folder, sorted(wrong - set(table)), set(table) - set(kinds))
        for name, bugs in table.items():  # (a correct file may be listed, with no bug)
            assert (kinds[name] == "correct") == (bugs == []), name
            assert kinds[name] == "correct" or len(bugs) == len(run.truth(run.HERE / corpus / folder /
                                                                          f"{name}.py")["bugs"]), name
