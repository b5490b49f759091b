"""The one place where attention's arguments are checked and put into a standard form.

Every form of attention in attnlab takes exactly the arguments of PyTorch's
``F.scaled_dot_product_attention``. Rather than each form checking them its own way (and
drifting apart), every form calls :func:`check` first. It either raises a ``ValueError`` /
``TypeError`` whose message names the argument and the shapes, or returns an :class:`Args`
in which

* the leading batch dims are flattened into one, so every form sees ``q`` as ``(N, H, L, E)``,
  ``k`` as ``(N, Hkv, S, E)`` and ``v`` as ``(N, Hkv, S, Ev)``;
* a tensor ``attn_mask`` is 4-D and broadcastable to ``(N, H, L, S)``;
* a mask *function* (see :mod:`attnlab.kernels.masks`) is kept as it is, so the flash form can
  skip whole tiles; forms that want a dense mask call :meth:`Args.dense_mask`;
* ``scale`` is a float (default ``1/sqrt(E)``).

No ``assert`` guards user input anywhere in attnlab: this module is where input meets code.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from .masks import Mask, causal

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class Args:
    """Checked, normalised arguments of one attention call."""

    q: torch.Tensor  # (N, H, L, E)
    k: torch.Tensor  # (N, Hkv, S, E)
    v: torch.Tensor  # (N, Hkv, S, Ev)
    attn_mask: torch.Tensor | None  # bool (True = attend) or float (added); 4-D, broadcasts to (N, H, L, S)
    mask: Mask | None  # a mask function, for forms that can skip tiles
    is_causal: bool  # upper-left aligned, as in PyTorch
    dropout_p: float
    scale: float
    batch_shape: tuple[int, ...]  # the leading dims that were flattened into N
    squeeze_heads: bool  # True when the caller passed 2-D (L, E) inputs with no head dim

    @property
    def N(self) -> int:
        return self.q.shape[0]

    @property
    def H(self) -> int:
        return self.q.shape[1]

    @property
    def Hkv(self) -> int:
        return self.k.shape[1]

    @property
    def L(self) -> int:
        return self.q.shape[2]

    @property
    def S(self) -> int:
        return self.k.shape[2]

    @property
    def E(self) -> int:
        return self.q.shape[3]

    @property
    def Ev(self) -> int:
        return self.v.shape[3]

    @property
    def groups(self) -> int:
        """How many query heads share one key/value head (1 without GQA)."""
        return self.H // self.Hkv

    def dense_mask(self) -> torch.Tensor | None:
        """One mask tensor that means the same as ``attn_mask`` / ``mask`` / ``is_causal``.

        Bool (True = attend) or float (added to the scores), broadcastable to (N, H, L, S);
        ``None`` when nothing is masked. Forms without a tiled path use this.
        """
        if self.mask is not None:
            return self.mask.dense(self.N, self.H, self.L, self.S, device=self.q.device)
        if self.is_causal:  # upper-left aligned like PyTorch: (1, 1, L, S)
            return causal().dense(self.N, self.H, self.L, self.S, device=self.q.device)
        return self.attn_mask

    def unflatten(self, out: torch.Tensor) -> torch.Tensor:
        """(N, H, L, Ev) -> the caller's leading dims + (H, L, Ev)."""
        out = out.reshape(*self.batch_shape, *out.shape[1:])
        return out.squeeze(-3) if self.squeeze_heads else out


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def check_score_mod(score_mod):
    """``score_mod=``: None, an :class:`attnlab.mods.Mod`, or a function (score, b, h, q_idx, kv_idx) -> score.

    Returns a Mod or None; anything not callable is a TypeError naming ``score_mod``. What the
    modifier returns (shape, dtype) is checked each time it runs (:meth:`Mod.apply`).
    """
    from .mods import as_mod

    return as_mod(score_mod)


def check(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
) -> Args:
    """Validate SDPA's arguments and return them normalised (see the module docstring)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"{name} has dtype {t.dtype}; attention needs floating-point inputs "
                "(float16, bfloat16, float32 or float64)"
            )
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., L, E), got shape {_shape(t)}")
        if 0 in t.shape:
            raise ValueError(f"{name} has an empty dimension: shape {_shape(t)}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must have one dtype, got {query.dtype}, {key.dtype} and {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device} and {value.device}"
        )
    if not (query.dim() == key.dim() == value.dim()):
        raise ValueError(
            f"query, key and value must have the same number of dims, got query {_shape(query)}, "
            f"key {_shape(key)}, value {_shape(value)}"
        )
    shapes = f"query {_shape(query)}, key {_shape(key)}, value {_shape(value)}"
    if not (query.shape[:-3] == key.shape[:-3] == value.shape[:-3]):
        raise ValueError(f"batch dims differ: {shapes}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query has feature dim E={query.shape[-1]} but key has E={key.shape[-1]}; they must match ({shapes})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key has {key.shape[-2]} positions but value has {value.shape[-2]}; they must match ({shapes})"
        )

    squeeze_heads = query.dim() == 2
    if squeeze_heads:  # (L, E): a single head with no batch
        query, key, value = query[None], key[None], value[None]
    H, Hkv = query.shape[-3], key.shape[-3]
    if value.shape[-3] != Hkv:
        raise ValueError(f"key has {Hkv} heads but value has {value.shape[-3]}; they must match ({shapes})")
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {type(enable_gqa).__name__}")
    if Hkv != H:
        if not enable_gqa:
            raise ValueError(
                f"key has {Hkv} heads but query has {H}; pass enable_gqa=True or give key {H} heads ({shapes})"
            )
        if H % Hkv != 0:
            raise ValueError(
                f"enable_gqa=True needs query heads to be a multiple of key heads, "
                f"got query {H} and key {Hkv} heads ({shapes})"
            )

    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {is_causal!r}")

    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p must be a number in [0, 1), got {dropout_p!r}")
    if not (0.0 <= float(dropout_p) < 1.0):
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")

    E = query.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(E)
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a positive number or None, got {scale!r}")
    elif not math.isfinite(float(scale)) or float(scale) <= 0.0:
        raise ValueError(f"scale must be a positive, finite number, got {scale}")

    batch_shape = tuple(query.shape[:-3])
    N = math.prod(batch_shape)
    L, S = query.shape[-2], key.shape[-2]
    q = query.reshape(N, H, L, E)
    k = key.reshape(N, Hkv, S, E)
    v = value.reshape(N, Hkv, S, value.shape[-1])

    mask_fn = None
    dense = None
    if isinstance(attn_mask, Mask):
        if is_causal:
            raise ValueError("is_causal=True cannot be combined with attn_mask; put causality in the mask instead")
        mask_fn = attn_mask
        mask_fn.check_sizes(N=N, H=H, L=L, S=S)
    elif attn_mask is not None:
        dense = _check_mask_tensor(attn_mask, query, batch_shape, H, L, S, N, is_causal, squeeze_heads)

    return Args(
        q=q,
        k=k,
        v=v,
        attn_mask=dense,
        mask=mask_fn,
        is_causal=is_causal,
        dropout_p=float(dropout_p),
        scale=float(scale),
        batch_shape=batch_shape,
        squeeze_heads=squeeze_heads,
    )


def _check_mask_tensor(m, query, batch_shape, H, L, S, N, is_causal, squeeze_heads) -> torch.Tensor:
    if not isinstance(m, torch.Tensor):
        raise TypeError(
            f"attn_mask must be a torch.Tensor, an attnlab mask (attnlab.masks) or None, got {type(m).__name__}"
        )
    if is_causal:
        raise ValueError(
            f"is_causal=True cannot be combined with attn_mask (shape {_shape(m)}); "
            "pass one or the other, or use attnlab.masks to combine them"
        )
    if m.dtype != torch.bool and m.dtype != query.dtype:
        raise TypeError(
            f"attn_mask has dtype {m.dtype} but query has {query.dtype}; "
            f"pass a bool mask (True = attend) or a float mask of dtype {query.dtype}"
        )
    if m.device != query.device:
        raise ValueError(f"attn_mask is on {m.device} but query is on {query.device}")
    full = (*batch_shape, H, L, S) if not squeeze_heads else (L, S)
    target = "(" + ", ".join(str(s) for s in full) + ")"
    if m.dim() < 2 or m.dim() > len(full):
        raise ValueError(
            f"attn_mask has shape {_shape(m)} but must broadcast to (..., L, S) = {target}"
        )
    for have, want in zip(reversed(m.shape), reversed(full), strict=False):
        if have not in (1, want):
            raise ValueError(f"attn_mask has shape {_shape(m)} which does not broadcast to {target}")
    if squeeze_heads:
        full = (*batch_shape, H, L, S)
    m = m.reshape((1,) * (len(full) - m.dim()) + tuple(m.shape))
    lead = m.shape[:-3]
    if all(s == 1 for s in lead):
        return m.reshape(1, *m.shape[-3:])
    return m.expand(*batch_shape, *m.shape[-3:]).reshape(N, *m.shape[-3:])
