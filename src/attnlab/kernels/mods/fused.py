"""What a built-in modifier tells the flash form so that it can be fused into the tiles instead of called.

Called as a function on every tile, a modifier costs passes that each allocate a tile (the soft-cap: a multiply to
natural units, divide, tanh, multiply, a multiply back, four index tensors) and, in the backward, autograd's graph
and ``autograd.grad`` per tile. A :class:`Fused` modifier says instead, in closed form, what the flash form needs
(flash.py [P12]):

* whether it is **bounded** -- no modified score can pass +-SAFE_LOGIT, so that its tiles may skip the running max
  ([P2]) -- from a bound on |q.k| scale and the distances the mask lets a row see (its *reach*);
* its **fused form** on a tile of base-2 scores, in place (:meth:`Fused.tile`), and on a batch of key bands
  (:meth:`Fused.band_bias` once per batch, :meth:`Fused.band` per head);
* its **gradient**: dS pulled back to the raw scores, and the gradient of the tensor it holds (:meth:`Fused.grad`).

Its function stays the definition: every other form calls it, and the tests hold the two together. A new fused
modifier is one subclass (its function, these methods) and its test; :class:`Additive` is the base of the two that
add a per-head bias (ALiBi, T5's). The flash form asks only these methods, never which modifier it holds.
"""

from __future__ import annotations

import torch

from ..online import LOG2E
from .mod import Mod


def distance(rows: slice, cols: slice, device) -> torch.Tensor:
    """kv_idx - q_idx over a block of scores, (1, 1, r, c) int64."""
    return (torch.arange(cols.start, cols.stop, device=device).view(1, -1)
            - torch.arange(rows.start, rows.stop, device=device).view(-1, 1)).view(1, 1, rows.stop - rows.start, -1)


class Fused(Mod):
    """A score modifier the flash form fuses (flash.py [P12]). Scores reach it in base-2 units (the true score times
    log2(e), flash.py [P8]) as a tile s4 (N, H, r, c) -- query head h = hk * G + g -- or one key head's bands
    (nb, G, bq, W)."""

    scratch = False  # needs a buffer of the tile's shape (the soft-cap: its tanh; its slope 1 - tanh^2 backward)
    wants_bound = False  # its fused form needs a bound on |alpha q.k| for the call (the soft-cap: to skip a clamp)

    def bounded(self, qk: float, reach: tuple | None, safe_logit: float) -> bool:
        """True when no modified score can pass ``safe_logit`` and every row's largest stays above -safe_logit.
        ``qk`` bounds |q.k| * scale; ``reach`` is (the largest kv_idx - q_idx any row sees, the least over the rows
        of the largest each sees), or None when the mask does not say."""
        raise NotImplementedError

    def alpha(self, scale: float) -> float:
        """What the scores' matmul multiplies each dot product by: scale * log2(e), base-2 units (flash.py [P1])."""
        return scale * LOG2E

    def check_heads(self, H: int) -> None:
        """Raise when the modifier cannot serve H query heads (a per-head tensor too short)."""

    def tile(self, s4: torch.Tensor, rows: slice, cols: slice, scratch: torch.Tensor | None, bound: float | None,
             slope: bool = False) -> None:
        """The fused form on one tile's product s4 (N, H, r, c), in place, to base-2 modified scores. ``scratch``:
        a buffer of s4's shape where :attr:`scratch` asks for one; with ``slope`` (the backward) it is left holding
        the derivative in the score, for :meth:`grad`. ``bound``: |alpha q.k| bounded, where :attr:`wants_bound`."""
        raise NotImplementedError

    def band_bias(self, rel: torch.Tensor, H: int, dtype, device, budget: int):
        """What a batch of key bands adds, made once per batch: ``rel`` (nb or 1, bq, W) holds kv_idx - q_idx of
        each band's rows and columns. ``budget``: the elements one batch may hold per head. None: nothing made."""
        return None

    def band(self, s4: torch.Tensor, made, hk: int, scratch: torch.Tensor | None, bound: float | None) -> None:
        """The fused form on key head ``hk``'s bands s4 (nb, G, bq, W), in place; ``made``: :meth:`band_bias`'s."""
        raise NotImplementedError

    def grad(self, dS4: torch.Tensor, rows: slice, cols: slice, slope: torch.Tensor | None,
             want: bool) -> torch.Tensor | None:
        """The chain rule on one tile: dS4 (N, H, r, c), the gradient w.r.t. the modified scores, becomes in place
        the gradient w.r.t. the raw ones; returns this tile's share of the held tensor's gradient when ``want``."""
        raise NotImplementedError


class Additive(Fused):
    """A fused modifier that adds a bias made from one tensor of per-head numbers (ALiBi's slopes, T5's table): its
    derivative in the score is 1, and its tensor's gradient is a sum of dS. Subclasses say the bias."""

    def __init__(self, fn, name: str, params, held: torch.Tensor, kind: str):
        super().__init__(fn, name, params)
        self.held = held  # (H, ...): one row per head
        self.kind = kind  # the name errors use

    def values(self, H: int, dtype, device, times: float = 1.0) -> torch.Tensor:
        """The held tensor's first H rows in ``dtype``, times ``times`` (log2(e) for base-2 scores)."""
        return self.held.detach().to(device, dtype)[:H] * times

    def check_heads(self, H: int) -> None:
        if self.held.shape[0] < H:
            raise ValueError(f"score modifier {self.kind} holds {self.held.shape[0]} heads but the attention has at "
                             f"least {H}")

    def bias(self, H: int, rows: slice, cols: slice, dtype, device, times: float = 1.0) -> tuple:
        """(a, b): what to add to (N, H, r, c) scores, ``a * b`` (b None: ``a`` alone), scaled by ``times``."""
        raise NotImplementedError

    def tile(self, s4, rows, cols, scratch=None, bound=None, slope=False) -> None:
        a, b = self.bias(s4.shape[1], rows, cols, s4.dtype, s4.device, times=LOG2E)
        if b is None:
            s4.add_(a)
        else:
            s4.addcmul_(a, b)

    def grad(self, dS4, rows, cols, slope=None, want=False):
        return self.held_grad(dS4, rows, cols) if want else None

    def held_grad(self, dS4: torch.Tensor, rows: slice, cols: slice) -> torch.Tensor:
        """The held tensor's gradient from one tile's dS (N, H, r, c) in natural units (rows past H: 0)."""
        raise NotImplementedError
