"""The shared argument checks: the name and the value in every message, bools never numbers."""

import math

import pytest

from attnlab.kernels import argcheck


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "4", None])
def test_positive_int_names_the_argument_and_the_value(bad):
    with pytest.raises(ValueError, match=rf"^world must be a positive integer, got {bad!r}$"):
        argcheck.positive_int("world", bad)


def test_good_values_come_back():
    assert argcheck.positive_int("n", 7) == 7
    assert argcheck.nonneg_int("n", 0) == 0
    assert argcheck.int_at_least("max_vocab", 2, 2) == 2
    assert argcheck.positive_real("s", 3) == 3.0 and isinstance(argcheck.positive_real("s", 3), float)
    assert argcheck.real_in_range("p", 0.0, 0.0, 1.0, high_open=True) == 0.0


def test_the_owner_voice():
    with pytest.raises(ValueError, match=r"^sliding_window needs a positive integer window, got 0$"):
        argcheck.positive_int("window", 0, owner="sliding_window")
    with pytest.raises(ValueError, match=r"^prefix_lm needs a non-negative integer prefix length, got -1$"):
        argcheck.nonneg_int("prefix length", -1, owner="prefix_lm")


def test_the_default_words_follow_the_lower_bound():
    with pytest.raises(ValueError, match=r"^n must be a non-negative integer, got -1$"):
        argcheck.int_at_least("n", -1, 0)
    with pytest.raises(ValueError, match=r"^max_chars must be an integer >= 1000, got 999$"):
        argcheck.int_at_least("max_chars", 999, 1000)
    with pytest.raises(ValueError, match=r"^block_q must be a positive integer tile size, got 0$"):
        argcheck.positive_int("block_q", 0, "a positive integer tile size")


@pytest.mark.parametrize("bad", [0, -1.5, math.inf, math.nan, True, "1"])
def test_positive_real(bad):
    with pytest.raises(ValueError, match=r"^timeout must be a positive, finite number of seconds, got "):
        argcheck.positive_real("timeout", bad, "a positive, finite number of seconds")


@pytest.mark.parametrize("bad", [1.0, -0.1, math.nan, False])
def test_real_in_range_half_open(bad):
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got "):
        argcheck.real_in_range("dropout", bad, 0.0, 1.0, high_open=True)
    if bad == 1.0:  # the closed interval takes its end
        assert argcheck.real_in_range("p", bad, 0.0, 1.0) == 1.0


def test_is_int_and_is_real_refuse_bools():
    assert argcheck.is_int(3) and not argcheck.is_int(True) and not argcheck.is_int(3.0)
    assert argcheck.is_real(3) and argcheck.is_real(2.5) and not argcheck.is_real(False) and not argcheck.is_real("1")


def test_broadcast_shapes_is_pytorchs_on_every_shape_and_fails_where_it_fails():
    import random

    import torch

    from attnlab.shapes import broadcast_shapes

    rng = random.Random(0)
    fails = 0
    for _ in range(5000):
        shapes = [tuple(rng.choice([0, 1, 1, 2, 3]) for _ in range(rng.randint(0, 4)))
                  for _ in range(rng.randint(1, 4))]
        try:
            want = tuple(torch.broadcast_shapes(*shapes))
        except RuntimeError:
            fails += 1
            with pytest.raises(RuntimeError, match="broadcast"):
                broadcast_shapes(*shapes)
            continue
        assert broadcast_shapes(*shapes) == want, shapes
    assert 500 < fails < 4500  # both sides of the rule were asked
