"""What every kernel of the corpus shares: the compute dtype, the refusal of dropout, and the online softmax.

The online softmax is FlashAttention's: per query row a running max m, a running sum l of exp(s - m) and an
accumulator of exp(s - m) @ V, rescaled by exp(m_old - m_new) when a tile raises the max. The max is a shift the
answer does not depend on, so it is carried detached (a kernel's backward treats it as a constant too). A row that has
seen no key yet has m = -inf; it is shifted by 0 instead, so exp never meets inf - inf. At the end a row with l = 0 saw
no key: its output is 0 and its log-sum-exp -inf, the log of an empty sum.
"""

from __future__ import annotations

import math

import torch

from attnlab import Unsupported


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; float32 and the half dtypes compute in float32 (FlashAttention's statistics)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def no_dropout(dropout_p: float) -> None:
    if dropout_p:
        raise Unsupported(f"dropout_p={dropout_p}: this kernel has no dropout")


def online_init(rows: tuple[int, ...], dv: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    """(m, l, acc) for rows (..., Lt) and a value dim dv: m = -inf, l = 0, acc = 0."""
    m = torch.full(rows, -math.inf, dtype=dtype, device=device)
    return m, torch.zeros(rows, dtype=dtype, device=device), torch.zeros(*rows, dv, dtype=dtype, device=device)


def online_step(m, l, acc, s, v):
    """Fold one tile in: s (..., Lt, St) scaled, modified and masked scores (-inf where masked), v (..., St, Dv)."""
    m_new = torch.maximum(m, s.detach().amax(-1))
    shift = torch.where(torch.isneginf(m_new), 0.0, m_new)  # a row that has seen no key yet
    alpha = torch.exp(m - shift)
    p = torch.exp(s - shift[..., None])
    return m_new, l * alpha + p.sum(-1), acc * alpha[..., None] + p @ v


def online_finish(m, l, acc):
    """out (..., Lt, Dv) and lse (..., Lt) in the compute dtype; rows that saw no key: 0 and -inf."""
    seen = l > 0
    l_safe = torch.where(seen, l, 1.0)
    out = acc / l_safe[..., None]
    lse = torch.where(seen, m + torch.log(l_safe), -math.inf)
    return out, lse


def dense_softmax(s):
    """softmax over the last dim of scores with -inf where masked; a row with no finite score gives zeros."""
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), 0.0, m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    l_safe = torch.where(l > 0, l, 1.0)
    return e / l_safe, torch.where(l > 0, m + torch.log(l_safe), -math.inf).squeeze(-1)


def kv_head_index(H: int, Hkv: int) -> torch.Tensor:
    """The key head each query head reads: h // (H / Hkv)."""
    if H % Hkv:
        raise ValueError(f"the query heads ({H}) must be a multiple of the key heads ({Hkv})")
    return torch.arange(H) // (H // Hkv)
