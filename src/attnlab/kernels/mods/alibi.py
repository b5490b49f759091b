"""ALiBi: ``score + slope_h * (kv_idx - q_idx)``, a penalty that grows with distance, one slope per head, instead of
position embeddings (Press et al., "Train Short, Test Long", 2021).

Fused (flash.py [P12]): one in-place ``addcmul_`` of slope x distance in base-2 units per tile; on the key bands the
distances are made once per batch of bands (once per call for a window, whose bands all see the same distances).
Its derivative in the score is 1; a learnable slope's gradient is one sum of dS times the distance per tile.
Bounded ([P2]) when the slopes are not negative and the mask's reach is known: under the causal mask every bias is
at most 0 and each row sees its own key, bias 0. Under the causal mask a steep head's far keys have weights that are
exactly 0, and the flash form drops them ([P13], :mod:`attnlab.kernels.flash_reach`).
"""

from __future__ import annotations

import math

import torch

from ..argcheck import positive_int
from ..online import LOG2E
from .fused import Additive, distance
from .mod import check_heads


class ALiBi(Additive):
    """``score + slopes[h] * (kv_idx - q_idx)``; ``slopes`` (H,) a tensor, learnable if it is one of ``params``."""

    def __init__(self, slopes: torch.Tensor, params: tuple = ()):
        H = slopes.shape[0]

        def fn(score, b, h, q_idx, kv_idx):
            check_heads("alibi", H, score, h)
            return score + slopes.to(score.device, score.dtype)[h] * (kv_idx - q_idx).to(score.dtype)

        super().__init__(fn, f"alibi({H})", params, slopes, "alibi")
        self.slopes = slopes

    def bounded(self, qk: float, reach: tuple | None, safe_logit: float) -> bool:
        """A slope x distance moves a score by at most the largest slope times the farthest key ahead (``reach[0]``)
        and leaves each row's largest no lower than the row's nearest key allows (``reach[1]``)."""
        t = self.slopes.detach()
        if reach is None or bool((t < 0).any()):
            return False
        hi, lo = reach
        most, least = float(t.max()), float(t.min())
        return qk + max(most * hi, least * hi) <= safe_logit and -qk + min(most * lo, least * lo) >= -safe_logit

    def bias(self, H, rows, cols, dtype, device, times=1.0) -> tuple:
        """(slopes (1, H, 1, 1), distance (1, 1, r, c)): one ``addcmul_``."""
        return self.values(H, dtype, device, times).view(1, H, 1, 1), distance(rows, cols, device).to(dtype)

    def held_grad(self, dS4, rows, cols) -> torch.Tensor:
        rel = distance(rows, cols, dS4.device)
        H = dS4.shape[1]  # the attention's heads: a tensor may hold more, whose gradient is then 0
        g = dS4.new_zeros(self.slopes.shape)
        g[:H] = (dS4 * rel.to(dS4.dtype)).sum(dim=(0, 2, 3))
        return g.to(self.slopes.device, self.slopes.dtype)  # where the tensor lives, as autograd wants its gradient

    def band_bias(self, rel, H, dtype, device, budget) -> tuple:
        """(slopes (H,), distance (nb or 1, 1, bq, W)), both in base-2 units' dtype."""
        return self.values(H, dtype, device, LOG2E), rel.unsqueeze(1).to(dtype)

    def band(self, s4, made, hk, scratch=None, bound=None) -> None:
        slopes, rel = made
        G = s4.shape[1]
        s4.addcmul_(slopes[hk * G:(hk + 1) * G].view(1, G, 1, 1), rel)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The geometric slopes of ALiBi: for 8 heads 1/2, 1/4, ..., 1/256.

    For a head count that is not a power of two, the paper takes the slopes of the next lower power
    of two and fills up with every other slope of twice that many heads.
    """
    positive_int("num_heads", num_heads, owner="alibi")

    def powers(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(num_heads))
    slopes = powers(p) + powers(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi(num_heads: int | None = None, *, slopes: torch.Tensor | None = None) -> ALiBi:
    """ALiBi: ``score + slope_h * (kv_idx - q_idx)``, a linear penalty on distance, one slope per head.

    ``alibi(8)`` uses the paper's geometric slopes; ``alibi(slopes=t)`` any (H,) tensor (learnable if
    it requires grad: it is then one of the modifier's ``params``).
    """
    if (num_heads is None) == (slopes is None):
        raise ValueError("alibi takes either num_heads or slopes=, not both and not neither")
    if slopes is None:
        return ALiBi(alibi_slopes(num_heads))
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1 or not slopes.is_floating_point():
        raise ValueError(f"alibi slopes must be a 1-d float tensor (one per head), got "
                         f"{tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__}")
    bad = ~torch.isfinite(slopes.detach())
    if bool(bad.any()):
        raise ValueError(f"alibi slopes must be finite numbers; slope {int(bad.nonzero()[0, 0])} of "
                         f"{slopes.shape[0]} is {float(slopes.detach()[bad][0])}")
    return ALiBi(slopes, (slopes,))
