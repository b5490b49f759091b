"""Soft-capping: ``cap * tanh(score / cap)`` keeps every logit inside (-cap, cap) (Gemma 2 uses 50, 30 for the logits).

Fused (flash.py [P12]): the 1 / cap and the tanh's doubling ride on the scores' matmul (its alpha is 2 scale / cap),
then one in-place tanh that multiplies by cap * log2(e) on the way (:func:`attnlab.kernels.online.tanh_`: expm1(2x)
/ (expm1(2x) + 2), three passes, 0.54 ns an element against 1.38 for torch.tanh). Its derivative in the score,
1 - tanh^2, is kept in a buffer on the backward's way and multiplies dS in place. A cap of at most SAFE_LOGIT
bounds every score whatever q.k is, so its tiles skip the running max ([P2]).
"""

from __future__ import annotations

import torch

from ..argcheck import positive_real
from ..online import LOG2E, expm1_fits, tanh_
from .fused import Fused


class SoftCap(Fused):
    """``cap * tanh(score / cap)``: every score squashed into (-cap, cap)."""

    scratch = True
    wants_bound = True

    def __init__(self, cap: float):
        c = positive_real("cap", cap, "a positive, finite", owner="softcap")

        def fn(score, b, h, q_idx, kv_idx):
            return torch.tanh(score / c) * c

        super().__init__(fn, f"softcap({c:g})")
        self.cap = c

    def bounded(self, qk: float, reach: tuple | None, safe_logit: float) -> bool:
        return self.cap <= safe_logit

    def alpha(self, scale: float) -> float:
        """2 scale / cap: the product arrives as 2 q.k scale / cap, the doubled input :func:`tanh_` takes."""
        return 2 * scale / self.cap

    def tile(self, s4, rows, cols, scratch, bound, slope=False) -> None:
        times = self.cap * LOG2E
        t = tanh_(s4, scratch, times, doubled=True, clamp=bound is None or not expm1_fits(bound))  # times * tanh
        if slope:  # 1 - tanh^2 = 1 - (t / times)^2, over the tanh's denominator in the same buffer
            torch.addcmul(torch.ones((), dtype=s4.dtype), t, t, value=-1.0 / times ** 2, out=scratch)

    def band(self, s4, made, hk, scratch, bound) -> None:
        self.tile(s4, slice(0, 0), slice(0, 0), scratch, bound)

    def grad(self, dS4, rows, cols, slope, want=False):
        dS4.mul_(slope)
        return None


def softcap(cap: float) -> SoftCap:
    """``cap * tanh(score / cap)``: every score squashed into (-cap, cap); Gemma 2 uses 50 (30 for the logits)."""
    return SoftCap(cap)
