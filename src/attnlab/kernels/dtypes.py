"""The floating-point dtypes attention takes, by the names that configs and command-line flags use.

Half-precision inputs (float16, bfloat16) are computed in float32 and the result rounded back, as
PyTorch's reference path does on the CPU: :func:`compute_dtype` says which dtype a form computes in
(its softmax statistics, its accumulators). :func:`matmul_dtype` says in which dtype the flash form
multiplies its weights: FlashAttention's recipe rounds P (and, in the backward, dS) to the input's
half dtype and multiplies in half precision -- worth it only where the hardware multiplies half
precision fast: a GPU, or a CPU with AMX or AVX512-BF16. Elsewhere torch emulates half-precision
matmuls, many times slower than float32 ones, and the form stays in float32 (docs/flash.md).
"""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # the ring agrees on a dtype by index
HALF = (torch.float16, torch.bfloat16)
# float16's largest number is 65504: a half-precision product whose bound passes this is computed in float32.
FLOAT16_SAFE = 2.0**15


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs, else the dtype itself."""
    return torch.float32 if dtype in HALF else dtype


def fast_half_matmuls(dtype: torch.dtype, device) -> bool:
    """Whether ``device`` multiplies ``dtype`` (a half dtype) at least as fast as float32.

    A CUDA GPU does (tensor cores). A CPU does with AMX tiles or AVX512-BF16 for bfloat16, and with
    AMX-FP16 for float16; oneDNN's own "bf16 supported" answer is not the test, as it is also true
    on AVX-512 CPUs that only emulate bfloat16."""
    device = torch.device(device)
    if dtype not in HALF:
        return False
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    if dtype == torch.bfloat16:
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    return bool(torch.cpu._is_amx_fp16_supported())


def matmul_dtype(dtype: torch.dtype, device, half_matmuls: bool | None = None) -> torch.dtype:
    """The dtype of the flash form's weight matmuls (P V, P^T dO, dS K, dS^T Q) for inputs of ``dtype``.

    The input's half dtype where the hardware multiplies it fast (:func:`fast_half_matmuls`), else
    :func:`compute_dtype` (float32 for half inputs, the dtype itself otherwise). ``half_matmuls``
    forces the choice for half inputs: True the half dtype, False float32; it changes nothing for
    float32 and float64 inputs."""
    if dtype not in HALF:
        return compute_dtype(dtype)
    use = fast_half_matmuls(dtype, device) if half_matmuls is None else bool(half_matmuls)
    return dtype if use else torch.float32


def half_product_fits(dtype: torch.dtype, bound: float) -> bool:
    """Whether a half-precision product whose entries are at most ``bound`` stays finite in ``dtype``:
    always in bfloat16 (float32's range), up to :data:`FLOAT16_SAFE` in float16."""
    return dtype != torch.float16 or bound <= FLOAT16_SAFE
