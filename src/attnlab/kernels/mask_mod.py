"""How a FlexAttention-style ``mask_mod(b, h, q_idx, kv_idx)`` is asked about many positions at once.

FlexAttention calls a mask function for ONE position at a time: ``b``, ``h``, ``q_idx`` and ``kv_idx``
are 0-d tensors, and ``torch.vmap`` runs it over every position. Code is written that way: the
Flamingo cross-attention mask of attention-gym looks up ``intervals[image_boundaries[kv_idx]]`` and
compares ``q_idx`` with ``interval[0]``, which means "this image's start" for one key, but "the first
row of a table" when ``kv_idx`` is a whole row of keys.

attnlab asks about whole tiles at once with broadcast index tensors -- b (N,1,1,1), h (1,H,1,1),
q_idx (1,1,r,1), kv_idx (1,1,1,c) -- one call per tile, far cheaper than vmap. Most mask functions
(``q_idx >= kv_idx``, a window, document ids) answer such a call correctly. :class:`PerIndex` finds
out once, on the first call, which kind a function is: it compares the broadcast answer with the
vmapped one on a small corner of the problem and keeps the broadcast call when they agree (and
when vmap cannot run the function, e.g. Python ``if`` on an index); otherwise every later call goes
through ``torch.vmap``, as FlexAttention does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnlab.shapes import broadcast_shapes

_SAMPLE = 8  # positions per dim of the corner the two calls are compared on


class PerIndex:
    """``fn(b, h, i, j, L, S)`` for a mask_mod: the broadcast call where it is right, else vmap over each index."""

    def __init__(self, mask_mod: Callable):
        self.mask_mod = mask_mod
        self.vmapped: bool | None = None  # decided on the first call

    def __call__(self, b, h, i, j, L, S):
        if all(isinstance(t, torch.Tensor) and t.dim() == 0 for t in (b, h, i, j)):
            return self.mask_mod(b, h, i, j)  # asked one position at a time already (under vmap, as FlexAttention)
        if self.vmapped is None:
            self.vmapped = self._needs_vmap(b, h, i, j)
        return self._per_index(b, h, i, j) if self.vmapped else self.mask_mod(b, h, i, j)

    def _needs_vmap(self, b, h, i, j) -> bool:
        corner = [_head(t) for t in (b, h, i, j)]
        shape = broadcast_shapes(*(t.shape for t in corner))
        try:
            broadcast = torch.as_tensor(self.mask_mod(*corner), device=i.device)
            broadcast = broadcast.expand(shape)
        except Exception:  # noqa: BLE001 -- any failure of the broadcast call means it was written per index
            return True
        try:
            per_index = self._per_index(*corner).expand(shape)
        except Exception:  # noqa: BLE001 -- vmap cannot run it (data-dependent Python): the broadcast call stands
            return False
        return not torch.equal(per_index, broadcast)

    def _per_index(self, b, h, i, j) -> torch.Tensor:
        """The mask_mod at every position of the broadcast indices, one position at a time (torch.vmap)."""
        if all(t.dim() == 4 for t in (b, h, i, j)) and all(
                t.shape[d] == 1 for d, t in ((1, b), (2, b), (3, b), (0, h), (2, h), (3, h), (0, i), (1, i), (3, i),
                                             (0, j), (1, j), (2, j))):
            fn = self.mask_mod  # each index along its own dim: nested vmaps, (nb, nh, r, c) out
            for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
                fn = torch.vmap(fn, in_dims=dims)
            return _squeeze(fn(b.flatten(), h.flatten(), i.flatten(), j.flatten()))
        flat = torch.broadcast_tensors(b, h, i, j)  # any other layout (the band plan's): every position listed
        return torch.vmap(self.mask_mod)(*(t.reshape(-1) for t in flat)).reshape(flat[0].shape)


def _head(t: torch.Tensor) -> torch.Tensor:
    """The first few entries of an index tensor along each of its dims."""
    return t[tuple(slice(0, _SAMPLE) for _ in range(t.dim()))]


def _squeeze(m: torch.Tensor) -> torch.Tensor:
    """(N, H, r, c) -> size 1 in the batch / head dim where every batch element / head is the same."""
    if m.shape[0] > 1 and bool((m == m[:1]).all()):
        m = m[:1]
    if m.shape[1] > 1 and bool((m == m[:, :1]).all()):
        m = m[:, :1]
    return m
