"""The learner's lab: the starter is written once, the learner's file is loaded or refused in a line, the right
cases are chosen for each form, and the measurements are the learner's function's own."""

import ast

import pytest
import torch
import torch.nn.functional as F

from attnlab.judge import verify as V
from attnlab.judge.apart import loader
from attnlab.lab import files, grade, judged, levels, measure, starter
from attnlab.measure import growth
from tests.lab import level_solutions


def test_start_writes_the_starter_once_and_never_over_the_learners_file(tmp_path):
    first = files.start(tmp_path / "lab")
    assert first.written and first.path.endswith("attention_lab.py")
    text = (tmp_path / "lab" / "attention_lab.py").read_text()
    assert text == files.starter_text() and text.count("# TODO") == 4
    (tmp_path / "lab" / "attention_lab.py").write_text("# my own work\n")
    again = files.start(tmp_path / "lab")
    assert not again.written and (tmp_path / "lab" / "attention_lab.py").read_text() == "# my own work\n"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(files.LoadError, match="is a file, not a folder"):
        files.start(tmp_path / "afile")


@pytest.mark.parametrize(("text", "spec", "says"), [
    (None, "nothere.py", "nothere.py: no such file"),
    ("def attention_by_hand(q, k, v)\n    return q\n", "f.py", "f.py, line 1: syntax error"),
    ("import math\nx = 1 / 0\n", "f.py", "f.py, line 2: importing it raised ZeroDivisionError"),
    ("def mine(q, k, v):\n    return q\n", "f.py", "f.py has no function 'attention_by_hand'; it has mine"),
    ("attention_by_hand = 3\n", "f.py", "is a int, not a function"),
    ("import sys\nsys.exit(3)\n", "f.py", "f.py, line 2: importing it called sys.exit(3)"),
    ("raise KeyboardInterrupt\n", "f.py", "f.py, line 1: importing it raised KeyboardInterrupt"),
])
def test_a_file_that_cannot_be_checked_is_one_line(tmp_path, monkeypatch, text, spec, says):
    """The loader's errors, in this process (what happens to the process itself: test_lab_exits.py)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loader.sys, "meta_path", list(loader.sys.meta_path))  # its finder is for a judged process
    monkeypatch.setattr(loader.sys, "dont_write_bytecode", loader.sys.dont_write_bytecode)
    if text is not None:
        (tmp_path / "f.py").write_text(text)
    with pytest.raises(files.LoadError) as e:
        loader.load_file(*files.split(spec), module_name=f"attnlab_test_{abs(hash(text))}")
    assert says in str(e.value) and "\n" not in str(e.value)


def matrix(q, k, v):
    """Level 2 done: the learner's four tensor lines (tests/lab/level_solutions.py)."""
    return level_solutions.attention_matrix(q, k, v)


def test_forms_are_told_apart_by_their_signature():
    assert grade.form_of(starter.attention_by_hand) == "lab" and grade.form_of(matrix) == "lab"
    assert grade.form_of(F.scaled_dot_product_attention) == "sdpa"
    assert grade.form_of(lambda query, key, value, attn_mask=None, is_causal=False: query) == "sdpa"
    assert grade.form_of(lambda q, k, v, **kw: q) == "sdpa"
    with pytest.raises(files.LoadError, match="takes neither"):
        grade.form_of(lambda q, k: q)
    assert files.split("attention_lab.py") == (files.Path("attention_lab.py"), "attention_by_hand")
    assert files.split("dir/attention_lab.py:attention_matrix")[1] == "attention_matrix"


def test_the_lab_form_is_graded_on_the_cases_it_can_answer():
    grid = V.default_cases()
    chosen = [c for c in grid if grade.answerable(c)]
    assert chosen and all(c.is_causal and c.mask is None and c.scale is None and c.dropout_p == 0
                          and (c.Hkv or c.H) == c.H and c.mod is None for c in chosen)
    left = [c for c in grid if not grade.answerable(c)]  # each left out for a reason a (q, k, v) function cannot meet
    assert any(c.is_causal and c.Hkv for c in left) and any(c.is_causal and c.mod for c in left)
    assert any(c.is_causal and c.dropout_p for c in left) and any(not c.is_causal for c in left)
    graded, _ = grade.cases("lab", None)
    assert len(graded) == len(chosen)
    assert len(grade.cases("sdpa", None)[0]) == len(grid)
    slow, shrunk = grade.cases("lab", per_pair=1e-3)  # 1 ms a pair: every case cut to about 2 s
    assert shrunk and all(c.work <= 2_000 for c in slow)
    lab = grade.as_sdpa(matrix)
    q = torch.randn(1, 2, 5, 4)
    assert torch.allclose(lab(q, q, q, is_causal=True), F.scaled_dot_product_attention(q, q, q, is_causal=True),
                          atol=1e-6)
    with pytest.raises(TypeError, match="always causal"):
        lab(q, q, q)


def test_level_1_grades_every_case_small_and_keeps_what_each_asks():
    """The loops level's cases are cut to CASE_WORK query-key pairs whatever the function's speed, their batch,
    heads, head dims, dtype, layout, magnitude and alignment kept (L < S stays L < S)."""
    def aligned(L, S):
        return (L > S, L < S, L == 1)

    loops = levels.find("loops").module()
    for per_pair in (None, 1e-7, 72e-6):  # however fast it is: the same cases (a slower one is cut further)
        small, shrunk = grade.cases("lab", per_pair, most=loops.CASE_WORK)
        assert [c.label for c in small] == [c.label for c in grade.cases("lab", 72e-6, most=loops.CASE_WORK)[0]]
    whole = [c for c in V.default_cases() if grade.answerable(c)]  # the grid's, at its own sizes
    assert len(small) == len(whole) and shrunk
    for c, w in zip(small, whole, strict=True):
        assert c.work <= loops.CASE_WORK and c.name.startswith(w.name) and c.dtype == w.dtype
        assert (c.batch, c.H, c.E, c.Ev, c.is_causal, c.layout, c.magnitude) == (
            w.batch, w.H, w.E, w.Ev, w.is_causal, w.layout, w.magnitude)
        shape, whole_shape = (c.L, c.S or c.L), (w.L, w.S or w.L)
        assert [aligned(*shape) for shape in (shape, whole_shape)] == [aligned(*whole_shape)] * 2
        assert min(shape) >= 2
    slower, _ = grade.cases("lab", 10e-3, most=loops.CASE_WORK)  # 10 ms a pair: cut to 2 s a case by its rate
    assert all(c.work <= max(256, grade.CASE_SECONDS / 10e-3) for c in slower)


@pytest.mark.slow  # measured in a judged process of its own
def test_the_matrix_version_matches_and_its_memory_grows_quadratically():
    err = grade.match(grade.as_sdpa(matrix))
    assert err < 1e-6
    assert grade.match(grade.as_sdpa(lambda q, k, v: q * 0)) > 0.1
    assert grade.match(grade.as_sdpa(lambda q, k, v: 1 / 0)) == float("inf")
    # measured where lab check measures it: in a judged process of its own, so that no earlier test's threads or
    # freed-but-resident pages in this worker count in (or against) its high-water mark
    with judged.open_learner(f"{level_solutions.__file__}:attention_matrix") as learner:
        assert learner.level == "matrix" and learner.form == "lab"
        timings, fits, note = judged.measure(learner, (512, 1024, 2048), measure.BUDGET_S)
    mem = fits["memory"]
    print(f"matrix version: memory T^{mem.exponent:.2f} ({mem.low:.2f}-{mem.high:.2f}), time "
          f"T^{fits['time'].exponent:.2f} ({fits['time'].low:.2f}-{fits['time'].high:.2f}); "
          + ", ".join(f"T={t.seq} {t.peak_bytes} B" for t in timings))
    assert [t.seq for t in timings] == [512, 1024, 2048] and all(t.time_s and t.peak_bytes for t in timings)
    assert mem.lengths == (1024, 2048) and mem.repeats == measure.PEAKS  # the longer lengths, each measured 3 times
    # the T x T matrix of scores. A high-water mark can hold more than the call's own pages (another thread of this
    # test process allocating), never less: the least of each length's repeats is the call's, and grows as T^2
    least = growth.exponent([t.seq for t in timings[1:]], [min(t.peaks) for t in timings[1:]])
    print(f"from the least peak of each length: T^{least:.2f}")
    assert abs(least - 2) <= measure.QUADRATIC and mem.within(2, measure.QUADRATIC) is not False
    assert all(len(t.times_s) >= 2 and len(t.peaks) == measure.PEAKS for t in timings)
    assert "forward only" in note


@pytest.mark.long  # the loops version timed at growing sizes
@pytest.mark.slow  # over 2 s: four measurements, each peak after a garbage collection
def test_a_loops_version_is_measured_at_the_sizes_it_can_finish(monkeypatch):
    calls, clock = [], [0.0]

    def slow(q, k, v):  # 1 ms per thousand query-key pairs, on a clock of its own: a busy machine changes nothing
        calls.append(q.shape[-2])
        clock[0] += q.shape[-2] * k.shape[-2] * 1e-6
        return matrix(q, k, v)

    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    timings, fits, note = measure.measure(slow, "lab", seqs=(64, 256, 1024), budget_s=0.5)
    assert timings[0].time_s and timings[1].time_s and timings[2].skipped.startswith("estimated")
    assert 1024 not in calls and "T = 1024 not timed, each says why" in note and "--max-seconds" in timings[2].skipped
    assert fits["time"] is not None and fits["time"].lengths == (64, 256)
    calls.clear()
    timings, _, _ = measure.measure(slow, "lab", seqs=(64, 512), budget_s=0.1)
    est = float(timings[1].skipped.split()[1])  # "estimated 0.262 s a call ...; --max-seconds 1 lets it run"
    assert abs(est - 0.262144) < 1e-3 and f"--max-seconds {measure.allowing(est)} lets it run" in timings[1].skipped
    assert 512 not in calls
    timings, _, _ = measure.measure(slow, "lab", seqs=(64, 512), budget_s=measure.allowing(est))
    assert calls.count(512) == 1 and abs(timings[1].time_s - 0.262144) < 1e-9 and not timings[1].skipped
    calls.clear()  # a call over a sixth of the budget is made once: timed, and its peak memory measured in it
    timings, _, note = measure.measure(slow, "lab", seqs=(64, 256), budget_s=0.2)
    assert calls.count(256) == 1 and calls.count(64) > 1, calls
    assert abs(timings[1].time_s - 0.065536) < 1e-9 and timings[1].peak_bytes is not None and "one call where" in note
    calls.clear()  # 0.04 s, between a sixth and a quarter of 0.2 s: the six calls of a length measured more than once
    timings, _, note = measure.measure(slow, "lab", seqs=(64, 200), budget_s=0.2)  # would take 0.24 s, over its budget
    assert calls.count(200) == 1 and "one call where it takes over 0.0333 s" in note, (calls, note)
    calls.clear()  # within a sixth: the first, two timed calls that agree (a clock of its own: they do), three peaks
    timings, _, _ = measure.measure(slow, "lab", seqs=(64, 200), budget_s=0.25)  # -- more where the three disagree
    peaks = timings[1].peaks  # (the memory is the machine's own: a busy one can make its repeats disagree)
    assert calls.count(200) == 1 + 2 + len(peaks) and len(timings[1].times_s) == 2, calls
    assert len(peaks) == measure.PEAKS or (not measure.confirmed(peaks[:measure.PEAKS])
                                           and len(peaks) <= measure.PEAKS + measure.MORE_PEAKS), peaks


def test_the_starters_own_function_is_told_from_the_learners(tmp_path):
    files.start(tmp_path)
    text = (tmp_path / "attention_lab.py").read_text()
    assert files.given_text(text, "attention_by_hand")
    noted = text.replace("# the dot product of query i and key j", "# my note")  # a comment is not a change
    assert noted != text and files.given_text(noted, "attention_by_hand")
    edited = text.replace("scores.append(score)", "scores.append(score / math.sqrt(E))")
    assert edited != text and not files.given_text(edited, "attention_by_hand")
    assert not files.given_text("def attention_by_hand(q, k, v):\n    return q\n", "attention_by_hand")
    assert not files.given_text("x = 1\n", "attention_by_hand") and not files.given_text("def (", "attention_by_hand")


def test_the_loops_starter_gives_no_later_level_away(tmp_path):
    """Level 1's file holds attention_by_hand alone: level 2's four lines are the learner's to write."""
    files.start(tmp_path)
    text = (tmp_path / "attention_lab.py").read_text()
    tree = ast.parse(text)
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == ["attention_by_hand"]
    products = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)]
    softmaxes = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("softmax", "tril", "triu")]
    assert not products and not softmaxes  # no matrix product, no library softmax or mask: loops, by hand
    assert "attnlab lab start --level matrix" in text


def test_a_file_given_alone_is_checked_as_the_level_it_is_for():
    """`lab check FILE` with no :FUNCTION (and no attention_by_hand): the level whose starter has the file's name,
    else the one level whose function the file defines; two levels' functions and no name to choose by are refused,
    naming each FILE:FUNCTION."""
    loops = levels.find("loops")
    pick = levels.of_file
    assert pick(files.Path("lab_matrix.py"), ["attention_matrix"], loops).name == "matrix"
    # the learner pasted their level-4 flash_forward into lab_backward.py to get the log-sum-exp: still level 5
    assert pick(files.Path("lab_backward.py"), ["flash_forward", "flash_backward"], loops).name == "backward"
    assert pick(files.Path("mine.py"), ["helper", "decode_step"], loops).name == "decode"
    assert pick(files.Path("mine.py"), ["helper"], loops) is loops
    with pytest.raises(files.LoadError) as e:
        pick(files.Path("mine.py"), ["attention_matrix", "flash_forward"], loops)
    assert str(e.value) == ("mine.py defines the functions of 2 levels; say which to check: "
                            "mine.py:attention_matrix or mine.py:flash_forward")


def test_the_matrix_an_earlier_starter_gave_is_still_the_starters(tmp_path):
    """attention_lab.py as `lab start` wrote it before level 2 had a starter of its own held a finished
    attention_matrix; checked from such a file it is the starter's code, and an edit of it is the learner's."""
    earlier = files.starter_text() + files.EARLIER_GIVEN.replace("    L, S,", "    # as it came\n    L, S,")
    assert "# as it came" in earlier  # a comment is not a change
    assert files.given_text(earlier, "attention_matrix") and files.given_text(earlier, "attention_by_hand")
    edited = earlier.replace("/ math.sqrt(q.shape[-1])", "")
    assert not files.given_text(edited, "attention_matrix")
    assert not files.given_text(level_solutions_source(), "attention_matrix")  # the learner's own solution


def level_solutions_source():
    return files.Path(level_solutions.__file__).read_text()
