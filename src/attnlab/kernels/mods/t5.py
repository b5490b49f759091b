"""T5's relative bias: ``score + table[h, bucket(kv_idx - q_idx)]``, a learned number per head and *bucket* of the
distance (exact for near keys, logarithmic for far ones), as T5 does (Raffel et al., 2019).

Fused (flash.py [P12]): one in-place add of the tile's gathered bias in base-2 units; a tile whose distances all fall
into one bucket (every far tile) adds one number per head. On the key bands the gathered bias is made once per batch
of bands for every head while it stays small, else each head gathers its own. Its derivative in the score is 1; the
table's gradient is dS summed by bucket. Bounded ([P2]) when |q.k| scale + max|table| is within SAFE_LOGIT.
"""

from __future__ import annotations

import math

import torch

from ..argcheck import is_int
from ..online import LOG2E
from .fused import Additive, distance
from .mod import check_heads


def t5_bucket(rel: torch.Tensor, num_buckets: int, max_distance: int, bidirectional: bool) -> torch.Tensor:
    """T5's buckets for relative positions ``rel = kv_idx - q_idx``: exact when near, log-spaced when far."""
    bucket = torch.zeros_like(rel)
    n = num_buckets
    if bidirectional:
        n //= 2
        bucket = bucket + (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.clamp(rel, max=0)  # only the past counts; future keys share bucket 0
    exact = n // 2
    is_small = rel < exact
    far = exact + (torch.log(rel.clamp(min=1).float() / exact) / math.log(max_distance / exact)
                   * (n - exact)).long()
    far = torch.clamp(far, max=n - 1)
    return bucket + torch.where(is_small, rel, far)


class T5Bias(Additive):
    """``score + table[h, bucket(kv_idx - q_idx)]`` with ``table`` (H, num_buckets), a parameter of the modifier."""

    def __init__(self, table: torch.Tensor, max_distance: int, bidirectional: bool):
        H, num_buckets = table.shape
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional

        def fn(score, b, h, q_idx, kv_idx):
            check_heads("relative_bias", H, score, h)
            bucket = t5_bucket(kv_idx - q_idx, num_buckets, max_distance, bidirectional)  # (1, 1, r, c)
            return score + table.to(score.device, score.dtype)[h, bucket]

        super().__init__(fn, f"relative_bias({H}x{num_buckets})", (table,), table, "relative_bias")
        self.table = table

    def bucket(self, rel: torch.Tensor) -> torch.Tensor:
        return t5_bucket(rel, self.num_buckets, self.max_distance, self.bidirectional)

    def bounded(self, qk: float, reach: tuple | None, safe_logit: float) -> bool:
        """The bias moves a score by at most max|table|, whatever the mask."""
        return qk + float(self.table.detach().abs().max()) <= safe_logit

    def one_bucket(self, rows: slice, cols: slice, device) -> int | None:
        """The bucket when every distance of the block falls into the same one, else None. The bucket grows with
        |distance| on each side of 0, so the block's two extreme distances decide it."""
        lo, hi = cols.start - (rows.stop - 1), (cols.stop - 1) - rows.start
        if lo < 0 < hi:
            return None
        ends = self.bucket(torch.tensor([lo, hi], device=device))
        return int(ends[0]) if int(ends[0]) == int(ends[1]) else None

    def bias(self, H, rows, cols, dtype, device, times=1.0) -> tuple:
        """(table[h, bucket] (1, H, r, c), None), or (1, H, 1, 1) when the whole block is in one bucket."""
        t = self.values(H, dtype, device, times)
        one = self.one_bucket(rows, cols, device)
        if one is not None:  # the whole tile in one bucket (far keys): a constant per head
            return t[:, one].view(1, H, 1, 1), None
        return t[:, self.bucket(distance(rows, cols, device)[0, 0])].unsqueeze(0), None

    def held_grad(self, dS4, rows, cols) -> torch.Tensor:
        H = dS4.shape[1]  # the attention's heads: a table may hold more rows, whose gradient is then 0
        g = dS4.new_zeros(self.table.shape)
        if (one := self.one_bucket(rows, cols, dS4.device)) is not None:
            g[:H, one] = dS4.sum(dim=(0, 2, 3))
        else:
            rel = distance(rows, cols, dS4.device)
            g[:H].index_add_(1, self.bucket(rel[0, 0]).flatten(), dS4.sum(dim=0).reshape(H, -1))
        return g.to(self.table.device, self.table.dtype)  # where the tensor lives, as autograd wants its gradient

    def band_bias(self, rel, H, dtype, device, budget) -> tuple:
        """(None, the bias (H, nb or 1, bq, W)) gathered for every head while it holds at most ``budget`` per head
        or one band's worth; else (None, (table (H, n), buckets)) for each head to gather its own."""
        t = self.values(H, dtype, device, LOG2E)
        if rel.shape[0] == 1 or H * rel.numel() <= budget:  # all heads at once while it stays small
            return None, t[:, self.bucket(rel)]
        return None, (t, self.bucket(rel))

    def band(self, s4, made, hk, scratch=None, bound=None) -> None:
        _, bias = made
        G = s4.shape[1]
        heads = slice(hk * G, (hk + 1) * G)
        if isinstance(bias, tuple):
            table, buckets = bias
            s4.add_(table[heads][:, buckets].transpose(0, 1))
        else:
            s4.add_(bias[heads].transpose(0, 1))


def relative_bias(table: torch.Tensor, num_buckets: int | None = None, max_distance: int = 128,
                  bidirectional: bool = True) -> T5Bias:
    """T5-style learned relative bias: ``score + table[h, bucket(kv_idx - q_idx)]``.

    ``table`` is an (H, num_buckets) tensor, usually a learnable parameter (its gradient is computed by
    every form). ``bidirectional=False`` is T5's decoder: future keys all share one bucket.
    """
    if not isinstance(table, torch.Tensor) or table.dim() != 2 or not table.is_floating_point():
        raise ValueError(f"relative_bias needs a float table of shape (H, num_buckets), got "
                         f"{tuple(table.shape) if isinstance(table, torch.Tensor) else type(table).__name__}")
    H, nb = table.shape
    if not bool(torch.isfinite(table.detach()).all()):
        raise ValueError(f"relative_bias: the table of shape {(H, nb)} holds NaN or infinite values")
    num_buckets = nb if num_buckets is None else num_buckets
    if num_buckets != nb:
        raise ValueError(f"relative_bias: table has {nb} buckets but num_buckets={num_buckets}")
    min_buckets = 4 if bidirectional else 2
    if num_buckets < min_buckets:
        raise ValueError(f"relative_bias needs at least {min_buckets} buckets, got {num_buckets}")
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if not is_int(max_distance) or max_distance <= exact:
        raise ValueError(f"relative_bias: max_distance must be an integer above {exact}, got {max_distance!r}")
    return T5Bias(table, max_distance, bidirectional)
