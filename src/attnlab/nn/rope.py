"""Rotary position embedding (RoPE): position as a rotation of the queries and keys.

Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021).

Split a head's d features into d/2 pairs. At position m, rotate pair i by the angle m * theta_i,
where theta_i = base^(-2i/d): the first pairs turn fast, the last ones slowly. A rotation keeps
lengths, and the dot product of two rotated vectors depends only on the *difference* of their
angles, so

    rope(q, m) . rope(k, n) = q . R((n - m) theta) k

depends on how far apart the two tokens are, never on where they are. Shifting every position by
the same amount leaves every attention score unchanged. That is why a KV cache works with RoPE:
a key is rotated once, at its own position, when it enters the cache.

We pair feature i with feature i + d/2 (the "half split" used by GPT-NeoX and Llama), which needs
no interleaving and gives the same scores as pairing neighbours up to a fixed permutation.
"""

from __future__ import annotations

import torch

from attnlab.kernels.argcheck import is_int


def _check_head_dim(head_dim: int) -> None:
    if not is_int(head_dim) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim >= 2, got {head_dim!r}")


def frequencies(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i/d) for i = 0 .. d/2 - 1: the angle per position of each feature pair."""
    _check_head_dim(head_dim)
    if not base > 1.0:
        raise ValueError(f"RoPE base must be > 1, got {base!r}")
    i = torch.arange(0, head_dim, 2, dtype=torch.float64)
    return base ** (-i / head_dim)  # (d/2,)


def angles(positions: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta, each (T, d/2), in float64 (cast by :func:`apply`)."""
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.is_floating_point():
        raise ValueError("positions must be a 1-D integer tensor (one position per token)")
    a = positions.to(torch.float64)[:, None] * frequencies(head_dim, base)[None, :]  # (T, d/2)
    return torch.cos(a), torch.sin(a)


def apply(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate ``x`` (..., T, d) so that row t is at position ``positions[t]``."""
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError("x must be a tensor of shape (..., T, d)")
    T, d = x.shape[-2], x.shape[-1]
    _check_head_dim(d)
    if positions.shape != (T,):
        raise ValueError(f"positions has shape {tuple(positions.shape)} but x has T={T} rows")
    cos, sin = angles(positions.to(x.device), d, base)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # (T, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]  # (..., T, d/2) each: the two halves of every pair
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, d)
