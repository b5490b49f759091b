"""The lab graded as a learner meets it: the starter fails with the diagnosis of each TODO left, a solution
passes, and a planted bug gets its diagnosis -- verify's own diagnoses (attnlab.judge.diagnose), on the
starter's real text."""

import pytest

from attnlab.judge.apart import loader
from attnlab.lab import files, grade
from tests.lab import level_solutions

# each TODO of the starter, and the line that does it
DONE = {
    "scale": ("                # TODO 1 (scale): multiply the score by 1 / sqrt(E), so its spread does not grow with "
              "E\n",
              "                score = score / math.sqrt(E)\n"),
    "mask": ("                # TODO 2 (mask): a key after the query (j > i) gets no weight: make its score -inf\n",
             "                if j > i:\n                    score = torch.full_like(score, -math.inf)\n"),
    "softmax": ("            e = torch.exp(scores)\n", "            e = torch.exp(scores - scores.max())\n"),
    "dtype": ("    return out  # TODO 4 (dtype): return it in the inputs' dtype, as PyTorch does (bfloat16 in, "
              "bfloat16 out)\n", "    return out.to(dtype)\n"),
}
# the TODO left undone -> the diagnosis verify must put first
FIRST = {"scale": "unscaled", "mask": "causal-ignored", "softmax": "max-subtraction", "dtype": "dtype"}
# a solution whose mask also hides the diagonal (j >= i); its softmax gives a row with no visible key zeros, as PyTorch
DIAGONAL = [("if j > i:", "if j >= i:"),
            ("            e = torch.exp(scores - scores.max())\n",
             "            top = scores.max()\n"
             "            e = torch.exp(scores - top) if torch.isfinite(top) else torch.zeros_like(scores)\n"),
            ("            weights = e / e.sum()", "            weights = e / e.sum().clamp_min(1e-30)")]


def _solution(left=(), planted=()) -> str:
    text = files.starter_text()
    for todo, (line, done) in DONE.items():
        assert line in text, todo  # the starter still has this TODO, word for word
        if todo not in left:
            text = text.replace(line, done)
    for a, b in planted:
        assert a in text
        text = text.replace(a, b)
    return text


def _grade(tmp_path, name, text):
    """Grade the learner's file as lab check does, the function loaded here (the grading, not the process, is
    tested: test_lab_exits.py runs the real judged process)."""
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    fn = loader.load_file(path, "attention_by_hand", module_name=f"attnlab_test_{name}")
    result, _, _ = grade.grade(grade.as_sdpa(fn), "attention_by_hand", grade.form_of(fn), per_pair=None)
    return result, [d.key for d in result.diagnoses.get("attention_by_hand", [])]


@pytest.mark.long  # every TODO of the exercise left undone in turn, each a whole grading
@pytest.mark.slow
def test_each_todo_left_fails_with_its_diagnosis_a_solution_passes_a_planted_bug_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(grade, "MAX_WORK", 300)  # every case small enough for loops (the grid's shapes kept)
    monkeypatch.setattr(loader.sys, "meta_path", list(loader.sys.meta_path))  # the loader's finder, for this test only
    monkeypatch.setattr(loader.sys, "dont_write_bytecode", True)
    result, keys = _grade(tmp_path, "solution", _solution())
    print(f"solution: {result.counts()}")
    assert result.passed and keys == [] and len(result.rows) == len([c for c in grade.V.default_cases()
                                                                     if grade.answerable(c)])
    for todo, key in FIRST.items():
        result, keys = _grade(tmp_path, f"left_{todo}", _solution(left=[todo]))
        print(f"TODO {todo} left: {result.counts()['fail']} of {len(result.rows)} fail; diagnoses {keys}")
        assert not result.passed and keys[0] == key, (todo, keys)
    result, keys = _grade(tmp_path, "left_scale_mask", _solution(left=["scale", "mask"]))  # the two loop TODOs
    print(f"TODOs scale and mask left: diagnoses {keys}")
    assert not result.passed and set(keys[:2]) == {"unscaled", "causal-ignored"}, keys
    result, keys = _grade(tmp_path, "starter", files.starter_text())  # every TODO left: a cause for each
    print(f"the starter as written: diagnoses {keys}")
    assert not result.passed and result.counts()["pass"] == 0 and set(keys) == set(FIRST.values()), keys
    result, keys = _grade(tmp_path, "diagonal", _solution(planted=DIAGONAL))
    print(f"mask hiding the diagonal: diagnoses {keys}")
    assert not result.passed and keys[0] == "diagonal"
    # the same slip in the starter's own softmax: query 0 sees no key and its row is NaN -- the mask, not an overflow
    result, keys = _grade(tmp_path, "diagonal_nan", _solution(planted=DIAGONAL[:1]))
    print(f"mask hiding the diagonal, plain softmax: diagnoses {keys}")
    assert not result.passed and keys == ["diagonal"], keys
    for slip, planted, key in (("a future score set to 0", ("torch.full_like(score, -math.inf)",
                                                            "torch.zeros_like(score)"), "mask-zero"),
                               ("the mask turned round", ("if j > i:", "if j < i:"), "causal-reversed")):
        result, keys = _grade(tmp_path, key.replace("-", "_"), _solution(planted=[planted]))
        print(f"{slip}: diagnoses {keys}")
        assert not result.passed and keys[0] == key, (slip, keys)


@pytest.mark.long  # six gradings of the loops at the level's sizes, about 8 s each
@pytest.mark.slow
@pytest.mark.parametrize("slip", [None, *level_solutions.SLIPS["loops"]])
def test_each_slip_of_level_1_fails_the_grid_at_the_levels_small_sizes_and_the_solution_passes(slip):
    """Level 1 grades at most CASE_WORK query-key pairs a case (levels/loops.py): every slip of its solution still
    fails there, and the solution passes."""
    import functools

    from attnlab.lab import levels

    loops = levels.find("loops").module()
    fn = functools.partial(level_solutions.attention_by_hand, slip=slip)
    result, shrunk, note = grade.grade(grade.as_sdpa(fn), "attention_by_hand", "lab", per_pair=None, level=loops)
    print(f"{slip}: {result.counts()}")
    assert shrunk and f"at most {loops.CASE_WORK:,} query-key pairs each" in note
    assert result.passed == (slip is None), result.counts()
