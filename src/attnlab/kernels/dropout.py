"""Attention dropout that any form can reproduce, tile by tile.

PyTorch's train-mode dropout on the attention weights: each weight is zeroed with probability
``p`` and the survivors are scaled by ``1 / (1 - p)``, so the expected output is unchanged.

A tiled form cannot draw its random numbers in the same order as a form that holds the whole
L x S matrix, and its backward pass must regenerate exactly the mask its forward used without
storing it. So attnlab draws one seed per call from PyTorch's generator (``torch.manual_seed``
makes runs reproducible) and decides "keep or drop" for weight (n, h, i, j) with a hash of the
seed and the four indices -- a counter-based random number generator, the idea behind Philox,
which FlashAttention uses on the GPU. Any tile of the mask can be rebuilt on its own, and every
attnlab form (loops, matrix, flash) drops exactly the same weights for the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_M32 = 0xFFFFFFFF


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _M32
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _M32
    return x ^ (x >> 16)


def draw_seed() -> int:
    """One seed per attention call, from PyTorch's default generator."""
    return int(torch.randint(0, 2**31 - 1, (), dtype=torch.int64))


def keep_mask(seed: int, p: float, N: int, H: int, rows: torch.Tensor, cols: torch.Tensor,
              device="cpu") -> torch.Tensor:
    """Bool (N, H, len(rows), len(cols)): True where weight (n, h, row, col) survives dropout."""
    nh = torch.arange(N * H, device=device, dtype=torch.int64).view(N, H, 1, 1)
    r = rows.to(device=device, dtype=torch.int64).view(1, 1, -1, 1)
    c = cols.to(device=device, dtype=torch.int64).view(1, 1, 1, -1)
    row_h = _fmix32((_fmix32((nh * 0x9E3779B1 + seed) & _M32) + r * 0x27D4EB2F) & _M32)  # (N, H, R, 1)
    col_h = _fmix32((c * 0x165667B1 + 0x7F4A7C15) & _M32)  # (1, 1, 1, C)
    u = _fmix32((row_h ^ col_h) & _M32)  # uniform on [0, 2**32)
    return u >= int(p * 2**32)


def factor(p: float) -> float:
    """What a surviving weight is multiplied by: 1 / (1 - p); 0 when p = 1 (every weight dropped)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def apply(weights: torch.Tensor, seed: int, p: float, row0: int = 0, col0: int = 0) -> torch.Tensor:
    """Dropout on a (N, H, R, C) block of weights whose top-left element is (row0, col0)."""
    if p == 0.0:
        return weights
    N, H, R, C = weights.shape
    keep = keep_mask(seed, p, N, H, torch.arange(row0, row0 + R), torch.arange(col0, col0 + C), weights.device)
    return weights * keep * factor(p)


@dataclass(frozen=True)
class Dropout:
    """One call's dropout, as a tile loop needs it: which weights fall (``seed``), how many (``p``), and
    where this block's top-left weight sits in the whole problem (``row0``, ``col0``; ring attention
    computes the problem one block at a time, and a weight must fall wherever it is computed)."""

    seed: int = 0
    p: float = 0.0
    row0: int = 0
    col0: int = 0

    @property
    def active(self) -> bool:
        return self.p > 0.0

    def at(self, row0: int, col0: int) -> Dropout:
        """The same dropout for the block whose top-left weight is (row0, col0)."""
        return Dropout(self.seed, self.p, row0, col0)

    def keep(self, N: int, H: int, rows: slice, cols: slice, device="cpu") -> torch.Tensor:
        """Bool (N, H, rows, cols) of this block's tile ``rows`` x ``cols``: True where the weight survives."""
        r = torch.arange(self.row0 + rows.start, self.row0 + rows.stop)
        c = torch.arange(self.col0 + cols.start, self.col0 + cols.stop)
        return keep_mask(self.seed, self.p, N, H, r, c, device)


NO_DROPOUT = Dropout()
