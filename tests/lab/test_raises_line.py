"""A learner's code that raises in a level's own request is told "raises" with its exception, as verify tells it --
not "no single pattern": the row the lab builds from what its code raised carries the exception's facts."""

from types import SimpleNamespace

from attnlab.judge.diagnose import diagnose
from attnlab.lab.levels import own


def test_an_error_row_from_what_the_learners_code_raised_is_a_raises_line():
    r = own.row("flash_forward", "the level's own cases", "float32", [],
                error="IndexError: amax(): Expected reduction dim -1 to have non-zero size. (lab_flash.py, line 67)")
    assert (r.facts.kind, r.facts.raised_type) == ("raised", "IndexError")
    lines = diagnose(SimpleNamespace(rows=[r]), "flash_forward")
    print([(d.key, d.text) for d in lines])
    assert [d.key for d in lines] == ["raises"] and "IndexError: amax()" in lines[0].text


def test_an_error_that_is_no_exception_names_none():
    r = own.row("flash_forward", "the level's own cases", "float32", [], error="no answer")
    assert r.facts.kind == "" and [d.key for d in diagnose(SimpleNamespace(rows=[r]), "flash_forward")] != ["raises"]
