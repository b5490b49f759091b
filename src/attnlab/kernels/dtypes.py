"""The floating-point dtypes attention takes, by the names that configs and command-line flags use.

Half-precision inputs (float16, bfloat16) are computed in float32 and the result rounded back, as
PyTorch's reference path does on the CPU: :func:`compute_dtype` says which dtype a form computes in.
"""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # the ring agrees on a dtype by index
HALF = (torch.float16, torch.bfloat16)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs, else the dtype itself."""
    return torch.float32 if dtype in HALF else dtype
