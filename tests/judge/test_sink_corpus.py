"""verify on the blind sink corpus (tests/unseen/sinks/<api>/*.py, written by a helper who had not read the judge):
no right sink kernel fails, every wrong one does, at least 85 % are named (a single bug's line first, each bug of a
two-bug kernel among the lines), and no line names a bug the kernel does not have. The files are judged as
``python -m tests.unseen.run sinks`` judges them and graded against tests/unseen/labels.py's SINKS, set down from
their truths; ``python -m tests.unseen.grade RUN.json sinks`` prints the same table."""

import pytest

from tests.unseen import grade, labels, run

pytestmark = [pytest.mark.slow, pytest.mark.long]  # ~45 kernels over their APIs' quick grids in three dtypes

NAMED = 0.85
# right sink kernels the judge fails on cases without sinks, where its verdict stands against the file's label (each
# said why; held to exactly those cases): none may fail a sink case
OUTSIDE_THE_SINKS = {
    "sdpa/correct_tiled_custom_backward": ("learnable", "its autograd.Function returns None as a learnable float "
                                                        "attn_mask's gradient; SDPA's contract gives one"),
}


@pytest.fixture(scope="module")
def graded():
    import torch

    torch.set_num_threads(1)
    rows = [run.judge_kernel(e) for e in run.entries("sinks")]
    return grade.grade(rows, labels.SINKS, labels.SINKS_ALSO)


def test_every_file_has_its_labels(graded):
    assert sorted(g["name"] for g in graded) == sorted(labels.SINKS)


def test_right_sink_kernels_pass_and_wrong_ones_fail(graded):
    print(grade.table(graded))
    failed_right = [g["name"] for g in graded if g["kind"] == "correct" and not g["named"]]
    alive = [g["name"] for g in graded if g["kind"] != "correct" and g["verdict"] == "not failed"]
    for name in set(failed_right) & set(OUTSIDE_THE_SINKS):
        word, why = OUTSIDE_THE_SINKS[name]
        failing = next(g["failing"] for g in graded if g["name"] == name)
        print(f"{name}: fails {failing}: {why}")
        assert failing and all(word in c and "sink" not in c for c in failing), (name, failing)
    assert set(failed_right) <= set(OUTSIDE_THE_SINKS), failed_right
    assert not alive, alive


def test_the_lines_name_each_bug_and_no_other(graded):
    wrong = [g for g in graded if g["kind"] != "correct"]
    missed = [(g["name"], g["verdict"], g["keys"][:4]) for g in wrong if not g["named"]]
    false = [(g["name"], g["false"]) for g in graded if g["false"]]
    print(f"named {len(wrong) - len(missed)} of {len(wrong)}; missed {missed}; false {false}")
    assert len(wrong) - len(missed) >= NAMED * len(wrong), missed
    assert not false, false
