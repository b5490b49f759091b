"""The dtype names and the dtype each form computes in."""

import torch

from attnlab.kernels._check import check
from attnlab.kernels.dtypes import DTYPES, FLOAT_DTYPES, compute_dtype


def test_every_name_is_a_float_dtype_spelled_as_torch_spells_it():
    assert set(DTYPES.values()) == set(FLOAT_DTYPES)
    assert all(str(dt) == f"torch.{name}" for name, dt in DTYPES.items())


def test_half_precision_is_computed_in_float32():
    assert compute_dtype(torch.float16) == compute_dtype(torch.bfloat16) == torch.float32
    assert compute_dtype(torch.float32) == torch.float32 and compute_dtype(torch.float64) == torch.float64
    for dt in FLOAT_DTYPES:
        q = torch.zeros(1, 2, 3, 4, dtype=dt)
        assert check(q, q, q).work == compute_dtype(dt)
