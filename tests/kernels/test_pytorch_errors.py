"""Bad input raises what code written for PyTorch catches: where F.scaled_dot_product_attention raises
RuntimeError (or TypeError), every form's error is one too, with attnlab's message naming the argument."""

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.kernels.errors import ArgumentError, ArgumentTypeError

q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
CASES = {  # name: (arguments, keyword, words attnlab's message must hold)
    "query not a tensor": (([1.0], k, v), {}, "query must be a torch.Tensor"),
    "integer inputs": ((q.long(), k.long(), v.long()), {}, "query has dtype torch.int64"),
    "1-d query": ((torch.randn(8), k, v), {}, "query must have at least 2 dims"),
    "dtypes differ": ((q, k.double(), v.double()), {}, "must have one dtype"),
    "feature dims differ": ((q, torch.randn(1, 2, 5, 6), v), {}, "E=8 but key has E=6"),
    "batch dims do not broadcast": ((torch.randn(2, 2, 4, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)), {},
                                    "batch dims do not broadcast"),
    "heads differ without GQA": ((torch.randn(1, 4, 4, 8), k, v), {}, "key has 2 heads but query has 4"),
    "GQA heads not a multiple": ((torch.randn(1, 3, 4, 8), k, v), {"enable_gqa": True}, "multiple of key heads"),
    "enable_gqa not a bool": ((q, k, v), {"enable_gqa": 1}, "enable_gqa must be a bool"),
    "is_causal not a bool": ((q, k, v), {"is_causal": 1}, "is_causal must be a bool"),
    "dropout_p a string": ((q, k, v), {"dropout_p": "a"}, "dropout_p must be a number"),
    "dropout_p above 1": ((q, k, v), {"dropout_p": 1.5}, "dropout_p must be in [0, 1], got 1.5"),
    "dropout_p below 0": ((q, k, v), {"dropout_p": -0.1}, "dropout_p must be in [0, 1], got -0.1"),
    "scale a string": ((q, k, v), {"scale": "a"}, "scale must be a number"),
    "integer mask": ((q, k, v), {"attn_mask": torch.ones(4, 5, dtype=torch.long)}, "attn_mask has dtype torch.int64"),
    "float64 mask, float32 query": ((q, k, v), {"attn_mask": torch.zeros(4, 5, dtype=torch.float64)},
                                    "attn_mask has dtype torch.float64"),
    "mask of the wrong shape": ((q, k, v), {"attn_mask": torch.ones(4, 6, dtype=torch.bool)},
                                "attn_mask has shape (4, 6) which does not broadcast"),
    "5-d mask": ((q, k, v), {"attn_mask": torch.ones(1, 1, 1, 4, 5, dtype=torch.bool)}, "attn_mask has shape"),
    "mask a list": ((q, k, v), {"attn_mask": [[True]]}, "attn_mask must be a torch.Tensor"),
}


def pytorch_raises(args, kw):
    try:
        F.scaled_dot_product_attention(*args, **kw)
    except Exception as e:  # noqa: BLE001 -- which class PyTorch raises is the point
        return type(e)
    return None


@pytest.mark.parametrize("impl", ["matrix", "flash", "sdpa", "loops"])
@pytest.mark.parametrize("name", list(CASES))
def test_the_error_is_of_the_class_pytorch_raises(name, impl):
    args, kw, words = CASES[name]
    theirs = pytorch_raises(args, kw)
    with pytest.raises(Exception) as got:  # noqa: PT011 -- its class is checked below
        attnlab.attention(*args, impl=impl, **kw)
    print(name, "PyTorch:", theirs and theirs.__name__, "attnlab:", type(got.value).__mro__[:3], got.value)
    assert words in str(got.value)
    for cls in (RuntimeError, TypeError):
        if theirs is not None and issubclass(theirs, cls):
            assert isinstance(got.value, cls), f"PyTorch raises {theirs.__name__}; attnlab {type(got.value).__name__}"


def test_the_classes_are_both():
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, RuntimeError)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, RuntimeError)
    try:  # what a caller written for PyTorch does
        attnlab.attention(q, k.half(), v.half(), impl="flash")
    except RuntimeError as e:
        assert "must have one dtype" in str(e)
