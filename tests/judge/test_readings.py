"""The reading rule (attnlab.judge.readings): a reading is named where the function's answers are its answers; a
pair of readings (two wrong steps at once) only by its numbers -- not by the rows its arithmetic leaves NaN alone --
and only what every pair that fits shares."""

import math

import torch

from attnlab.judge import readings as R

g = torch.Generator().manual_seed(0)
RIGHT = torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64)
WRONG = RIGHT * 3 + 1  # a reading's answer far from the right one


def _nan_rows(t: torch.Tensor, rows=(0, 1)) -> torch.Tensor:
    t = t.clone()
    t[..., list(rows), :] = math.nan
    return t


def test_says_yes_no_nothing_and_shown():
    assert R.says("out", WRONG, WRONG, RIGHT, torch.float64) == R.YES
    assert R.says("out", RIGHT, WRONG, RIGHT, torch.float64) == R.NO
    assert R.says("out", RIGHT, RIGHT, RIGHT, torch.float64) == R.NOTHING  # the reading is the right answer here
    # met by the rows it leaves NaN alone: elsewhere its numbers are the right answer's
    assert R.says("out", _nan_rows(RIGHT), _nan_rows(RIGHT), RIGHT, torch.float64) == R.SHOWN
    # rows it leaves NaN where the function has numbers say nothing of it (its own arithmetic, not the function's)
    assert R.says("out", RIGHT, _nan_rows(RIGHT), RIGHT, torch.float64) == R.NOTHING


def _case(answer):
    return lambda i: answer


def test_a_single_reading_met_by_its_nan_rows_is_named_and_a_pair_is_not():
    """An overflow's NaN rows show a softmax without its max (a single reading may be named so); a pair whose only
    meeting is those rows says nothing of its other step."""
    mine = [{"out": _nan_rows(RIGHT)}]
    right = [{"out": RIGHT}]
    reading = _case(_nan_rows(RIGHT))
    assert R.named(mine, right, [torch.float64], [("max-subtraction", reading)]) == ["max-subtraction"]
    assert R.named(mine, right, [torch.float64], [], pairs=[(("unscaled", "unnormalised"), reading)]) == []
    assert R.named([{"out": WRONG}], right, [torch.float64], [], pairs=[(("unscaled", "unnormalised"),
                                                                         _case(WRONG))]) == ["unscaled", "unnormalised"]


def test_where_several_pairs_fit_only_what_they_all_have_is_named():
    mine, right = [{"out": WRONG}], [{"out": RIGHT}]
    pairs = [(("a", "b"), _case(WRONG)), (("a", "c"), _case(WRONG)), (("d", "e"), _case(RIGHT + 5))]
    assert R.named(mine, right, [torch.float64], [], pairs=pairs) == ["a"]
    assert R.named(mine, right, [torch.float64], [], pairs=[(("a", "b"), _case(WRONG)),
                                                             (("c", "d"), _case(WRONG))]) == []
    assert R.common([("a", "b"), ("b", "a")]) == ["a", "b"] and R.common([]) == []
