"""A mask's arguments are checked where a user passes them, with the name and the value in the message."""

import pytest
import torch

from attnlab.kernels import flash
from attnlab.kernels.masks import Mask, causal


@pytest.mark.parametrize("bad", [3, None, "causal", [1, 2]])
def test_from_mod_wants_a_function(bad):
    with pytest.raises(TypeError, match=rf"mask_mod must be a function mask_mod\(b, h, q_idx, kv_idx\) -> bool "
                                        rf"tensor, got {type(bad).__name__}"):
        Mask.from_mod(bad)


def test_from_mod_with_a_function_works_like_the_builtin_mask():
    m = Mask.from_mod(lambda b, h, q, kv: kv <= q, "mine")
    assert m.name == "mine" and torch.equal(m.evaluate(1, 1, 9, 9), causal().evaluate(1, 1, 9, 9))


@pytest.mark.parametrize("block_q, block_k, name", [(0, 16, "block_q"), (16, -4, "block_k"), (2.5, 16, "block_q"),
                                                    (16, True, "block_k")])
def test_block_map_tile_sizes_must_be_positive_integers(block_q, block_k, name):
    bad = block_q if name == "block_q" else block_k
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer tile size, got {bad!r}"):
        causal().block_map(1, 1, 64, 64, block_q, block_k)
    q = torch.randn(1, 1, 64, 8)
    with pytest.raises(ValueError, match=rf"{name} must be a positive integer tile size"):  # the same words in flash
        flash.attention(q, q, q, is_causal=True, block_q=block_q, block_k=block_k)
