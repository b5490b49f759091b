"""Rotary position embedding: a rotation, and scores that depend only on relative position."""

import pytest
import torch

from attnlab.nn import rope


def test_shifting_every_position_leaves_the_scores_unchanged():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 9, 16, generator=g, dtype=torch.float64)  # (B, H, T, d)
    k = torch.randn(2, 3, 9, 16, generator=g, dtype=torch.float64)
    pos = torch.arange(9)
    base = rope.apply(q, pos) @ rope.apply(k, pos).transpose(-2, -1)  # (B, H, T, T)
    for shift in (1, 7, 1000):
        s = rope.apply(q, pos + shift) @ rope.apply(k, pos + shift).transpose(-2, -1)
        assert (s - base).abs().max() < 1e-9, shift
    assert (base - q @ k.transpose(-2, -1)).abs().max() > 1e-2  # positions do change the scores


def test_rotation_keeps_lengths_and_position_zero_is_identity():
    x = torch.randn(4, 5, 8, dtype=torch.float64)
    assert torch.allclose(rope.apply(x, torch.arange(5)).norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(rope.apply(x, torch.zeros(5, dtype=torch.long)), x)


def test_bad_input():
    with pytest.raises(ValueError, match="even head_dim"):
        rope.apply(torch.zeros(3, 5), torch.arange(3))
    with pytest.raises(ValueError, match="positions"):
        rope.apply(torch.zeros(3, 4), torch.arange(4))
    with pytest.raises(ValueError, match="integer"):
        rope.angles(torch.arange(3.0), 4)
