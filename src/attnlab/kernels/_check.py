"""The one place where attention's arguments are checked and put into a standard form.

Every form of attention in attnlab takes exactly the arguments of PyTorch's
``F.scaled_dot_product_attention``. Rather than each form checking them its own way (and
drifting apart), every form calls :func:`check` first. It either raises a ``ValueError`` /
``TypeError`` whose message names the argument and the shapes -- also a ``RuntimeError`` where
PyTorch raises one (:mod:`attnlab.kernels.errors`) -- or returns an :class:`Args` in which

* the leading batch dims are flattened into one, so every form sees ``q`` as ``(N, H, L, E)``,
  ``k`` as ``(N, Hkv, S, E)`` and ``v`` as ``(N, Hkv, S, Ev)``;
* a tensor ``attn_mask`` is 4-D and broadcastable to ``(N, H, L, S)``;
* a mask *function* (see :mod:`attnlab.kernels.masks`) is kept as it is, so the flash form can
  skip whole tiles; forms that want a dense mask call :meth:`Args.dense_mask`;
* PyTorch's own ``CausalBias`` (``torch.nn.attention.bias.causal_upper_left / causal_lower_right``,
  a tensor whose storage is never filled in) becomes the causal variant it names: ``is_causal``
  for upper-left (and for lower-right when L == S), else the lower-right mask function;
* ``scale`` is a float (default ``1/sqrt(E)``), ``dropout_p`` a float in [0, 1];
* ``sinks`` (gpt-oss's attention sinks, not an SDPA argument) is None or a floating (H,) tensor on the
  query's device, one logit per query head (:func:`_check_sinks`).

As in PyTorch, query, key and value broadcast against each other over their leading dims (a
query of rank 2 or 3 with a key of rank 4; a batch of 1 against a batch of 2; one key head
against many query heads), empty dims give empty (or, with no key, zero) outputs, and
``is_causal=True`` with an ``attn_mask`` keeps the keys both allow. The one argument PyTorch
accepts and attnlab refuses is a NaN or infinite ``scale`` (see :func:`_scale`).

No ``assert`` guards user input anywhere in attnlab: this module is where input meets code.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from attnlab.shapes import broadcast_shapes

from .argcheck import is_real
from .dtypes import FLOAT_DTYPES, compute_dtype
from .errors import ArgumentError, ArgumentTypeError
from .masks import Mask, and_masks, causal, causal_lower_right

_LOWER_RIGHT = causal_lower_right()  # one instance for every CausalBias, so its block maps are compiled once


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
    sinks: torch.Tensor | None = None  # (H,): one sink logit per query head, in the caller's dtype (gpt-oss)

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
    def work(self) -> torch.dtype:
        """The dtype a form computes in: float32 for half-precision inputs, else the inputs' dtype."""
        return compute_dtype(self.q.dtype)

    @property
    def groups(self) -> int:
        """How many query heads share one key/value head (1 without GQA)."""
        return self.H // self.Hkv if self.Hkv else 1

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

    @property
    def trivial(self) -> bool:
        """True when no score reaches the output: N, H, L, S or Ev is 0 (see :func:`empty_output`)."""
        return self.N * self.H * self.L * self.S * self.Ev == 0

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
    *,
    sinks=None,
) -> Args:
    """Validate SDPA's arguments and return them normalised (see the module docstring).

    One checker per group of arguments, in this order: the three tensors, their shapes, the flags,
    how they broadcast (GQA), dropout, scale, the mask, then the sinks (against the query heads that
    the broadcast left).
    """
    _check_tensors(query, key, value)
    shapes = _check_shapes(query, key, value)
    _check_flag("enable_gqa", enable_gqa)
    squeeze_heads = query.dim() == key.dim() == value.dim() == 2
    if squeeze_heads:  # (L, E): a single head with no batch
        query, key, value = query[None], key[None], value[None]
    query, key, value = _broadcast(query, key, value, enable_gqa, shapes)
    _check_flag("is_causal", is_causal)
    dropout_p = _dropout_p(dropout_p)
    scale = _scale(scale, query.shape[-1])

    batch_shape = tuple(query.shape[:-3])
    N = math.prod(batch_shape)
    q = query.reshape(N, *query.shape[-3:])  # (N, H, L, E)
    k = key.reshape(N, *key.shape[-3:])  # (N, Hkv, S, E)
    v = value.reshape(N, *value.shape[-3:])  # (N, Hkv, S, Ev)
    dense, mask_fn, is_causal = _check_mask(attn_mask, is_causal, q, k, batch_shape, squeeze_heads)
    sinks = _check_sinks(sinks, q, query)
    return Args(q=q, k=k, v=v, attn_mask=dense, mask=mask_fn, is_causal=is_causal, dropout_p=dropout_p,
                scale=scale, batch_shape=batch_shape, squeeze_heads=squeeze_heads, sinks=sinks)


def _check_sinks(sinks, q: torch.Tensor, query: torch.Tensor) -> torch.Tensor | None:
    """``sinks``: None, or a floating-point tensor of shape (H,) on the query's device -- one logit per *query*
    head (under GQA too: the heads that share a key head each keep their own sink), as gpt-oss holds them.

    Any floating dtype is taken; the forms compute with it in their working dtype, as gpt-oss casts its
    sinks to the scores'. Its values are not inspected: -inf is a sink that takes no weight (the same as
    none), and +inf or NaN give NaN, as the formula does.
    """
    if sinks is None:
        return None
    H = q.shape[1]
    want = f"(H,) = ({H},), one logit per query head (query {_shape(query)})"
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"sinks must be a torch.Tensor of shape {want}, or None; got {type(sinks).__name__}")
    if sinks.dtype not in FLOAT_DTYPES:
        raise ArgumentTypeError(f"sinks has dtype {sinks.dtype}; it must be a floating-point tensor "
                                "(float16, bfloat16, float32 or float64)")
    if tuple(sinks.shape) != (H,):
        raise ArgumentError(f"sinks has shape {_shape(sinks)} but must have shape {want}")
    if sinks.device != q.device:
        raise ArgumentError(f"sinks is on {sinks.device} but query is on {q.device}")
    return sinks


def _check_tensors(query, key, value) -> None:
    """Three floating-point tensors of at least 2 dims, of one dtype, on one device."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in FLOAT_DTYPES:
            raise ArgumentTypeError(
                f"{name} has dtype {t.dtype}; attention needs floating-point inputs "
                "(float16, bfloat16, float32 or float64)"
            )
        if t.dim() < 2:
            raise ArgumentError(f"{name} must have at least 2 dims (..., L, E), got shape {_shape(t)}")
    if not (query.dtype == key.dtype == value.dtype):
        raise ArgumentTypeError(
            f"query, key and value must have one dtype, got {query.dtype}, {key.dtype} and {value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ArgumentError(
            f"query, key and value must be on one device, got {query.device}, {key.device} and {value.device}"
        )


def _check_shapes(query, key, value) -> str:
    """query and key share the feature dim E, key and value the positions S; returns the shapes, for messages."""
    shapes = f"query {_shape(query)}, key {_shape(key)}, value {_shape(value)}"
    if query.shape[-1] != key.shape[-1]:
        raise ArgumentError(
            f"query has feature dim E={query.shape[-1]} but key has E={key.shape[-1]}; they must match ({shapes})"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ArgumentError(
            f"key has {key.shape[-2]} positions but value has {value.shape[-2]}; they must match ({shapes})"
        )
    return shapes


def _check_flag(name: str, value) -> None:
    """``enable_gqa`` and ``is_causal`` are bools (not 0 or 1)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")


def _check_mask(attn_mask, is_causal: bool, q, k, batch_shape, squeeze_heads):
    """``attn_mask`` and ``is_causal`` -> (dense mask or None, mask function or None, is_causal left over).

    A mask function is kept (sizes checked) so tiled forms can skip tiles; a tensor becomes 4-D,
    broadcastable to (N, H, L, S). With ``is_causal=True`` too, PyTorch keeps the keys both allow:
    causality is folded into the mask and ``is_causal`` comes back False.
    """
    N, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    bias = sys.modules.get("torch.nn.attention.bias")  # a CausalBias exists only once its module is imported
    if bias is not None and isinstance(attn_mask, bias.CausalBias):  # (importing it here would cost seconds)
        attn_mask, is_causal = _causal_bias(attn_mask, bias.CausalVariant, is_causal, L, S)
    if isinstance(attn_mask, Mask):
        mask_fn = and_masks(attn_mask, causal()) if is_causal else attn_mask
        mask_fn.check_sizes(N=N, H=H, L=L, S=S)
        return None, mask_fn, False
    if attn_mask is None:
        return None, None, is_causal
    dense = _check_mask_tensor(attn_mask, q, batch_shape, H, L, S, N, squeeze_heads)
    return (_with_causal(dense, L, S) if is_causal else dense), None, False


def _causal_bias(bias, variants, is_causal: bool, L: int, S: int):
    """PyTorch's CausalBias -> (None, True) for upper-left (lower-right with L == S is the same), else
    (the lower-right mask, False). Its storage is uninitialised: only its variant and sizes are read."""
    if is_causal:  # PyTorch's ValueError, in its words
        raise ValueError("attn_mask is a CausalBias and is_causal=True: CausalBias should not be used with "
                         "causal=True (it is causal already; pass one of them)")
    if (bias.seq_len_q, bias.seq_len_kv) != (L, S):
        raise ArgumentError(f"attn_mask is a CausalBias for ({bias.seq_len_q}, {bias.seq_len_kv}) but the call has "
                            f"L={L} queries and S={S} keys")
    if bias.variant == variants.UPPER_LEFT or L == S:
        return None, True
    return _LOWER_RIGHT, False


def _check_mask_tensor(m, query, batch_shape, H, L, S, N, squeeze_heads) -> torch.Tensor:
    if not isinstance(m, torch.Tensor):
        raise TypeError(
            f"attn_mask must be a torch.Tensor, an attnlab mask (attnlab.masks) or None, got {type(m).__name__}"
        )
    if m.dtype != torch.bool and m.dtype != query.dtype:
        raise ArgumentTypeError(
            f"attn_mask has dtype {m.dtype} but query has {query.dtype}; "
            f"pass a bool mask (True = attend) or a float mask of dtype {query.dtype}"
        )
    if m.device != query.device:
        raise ArgumentError(f"attn_mask is on {m.device} but query is on {query.device}")
    full = (*batch_shape, H, L, S) if not squeeze_heads else (L, S)
    target = "(" + ", ".join(str(s) for s in full) + ")"
    if m.dim() < 2 or m.dim() > len(full):
        raise ArgumentError(
            f"attn_mask has shape {_shape(m)} but must broadcast to (..., L, S) = {target}"
        )
    for have, want in zip(reversed(m.shape), reversed(full), strict=False):
        if have not in (1, want):
            raise ArgumentError(f"attn_mask has shape {_shape(m)} which does not broadcast to {target}")
    if squeeze_heads:
        full = (*batch_shape, H, L, S)
    m = m.reshape((1,) * (len(full) - m.dim()) + tuple(m.shape))
    lead = m.shape[:-3]
    if all(s == 1 for s in lead):
        return m.reshape(1, *m.shape[-3:])
    return m.expand(*batch_shape, *m.shape[-3:]).reshape(N, *m.shape[-3:])


def _broadcast(query, key, value, enable_gqa, shapes):
    """Broadcast q, k, v over their leading dims as PyTorch does; returns them, each of one rank >= 3.

    Dims before the head dim broadcast (size 1 against n). Heads: key and value broadcast against
    each other; one key head serves every query head (as PyTorch's broadcasting does, GQA or not);
    one query head against n key heads becomes n; other counts need ``enable_gqa=True`` and a multiple.
    """
    rank = max(3, query.dim(), key.dim(), value.dim())
    query, key, value = (t.reshape((1,) * (rank - t.dim()) + tuple(t.shape)) for t in (query, key, value))
    try:
        batch = list(broadcast_shapes(query.shape[:-3], key.shape[:-3], value.shape[:-3]))
    except RuntimeError:
        raise ArgumentError(f"batch dims do not broadcast: {shapes}") from None
    Hk, Hv = key.shape[-3], value.shape[-3]
    if Hk != Hv and 1 not in (Hk, Hv):
        raise ArgumentError(f"key has {Hk} heads but value has {Hv}; they must match ({shapes})")
    Hkv = max(Hk, Hv) if 0 not in (Hk, Hv) else 0
    H = query.shape[-3]
    if H == 1 and Hkv > 1 and not enable_gqa:
        H = Hkv  # one query head against many key heads: broadcast, as PyTorch does
    if Hkv != H and Hkv != 1:
        if not enable_gqa:
            raise ArgumentError(
                f"key has {Hkv} heads but query has {H}; pass enable_gqa=True or give key {H} heads ({shapes})"
            )
        if Hkv == 0 or H % Hkv != 0:
            raise ArgumentError(
                f"enable_gqa=True needs query heads to be a multiple of key heads, "
                f"got query {H} and key {Hkv} heads ({shapes})"
            )
    query = query.expand(*batch, H, *query.shape[-2:])
    key = key.expand(*batch, Hkv, *key.shape[-2:])
    value = value.expand(*batch, Hkv, *value.shape[-2:])
    return query, key, value


def _dropout_p(p) -> float:
    """dropout_p as a float in [0, 1]: a number or a one-element tensor, as PyTorch takes it."""
    if isinstance(p, torch.Tensor) and p.numel() == 1 and not p.dtype.is_complex and p.dtype != torch.bool:
        p = p.item()
    if not is_real(p):
        raise TypeError(f"dropout_p must be a number in [0, 1], got {p!r}")
    if not (0.0 <= float(p) <= 1.0):
        raise ArgumentError(f"dropout_p must be in [0, 1], got {p}")
    return float(p)


def _scale(scale, E: int) -> float:
    """scale as a float: None -> 1/sqrt(E); any finite real (negative and 0 too), or a one-element tensor.

    PyTorch also accepts NaN and +-inf and answers NaN, or zeros for NaN on its fused CPU kernel: no
    softmax is defined there, so attnlab says so instead of returning either.
    """
    if scale is None:
        return 1.0 / math.sqrt(E) if E > 0 else 1.0  # E = 0: every score is 0 whatever the scale
    if isinstance(scale, torch.Tensor) and scale.numel() == 1 and scale.dtype.is_floating_point:
        scale = scale.item()
    if not is_real(scale):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    if not math.isfinite(float(scale)):
        raise ValueError(
            f"scale must be a finite number, got {scale}: PyTorch accepts it and returns NaN (or zeros), "
            "but every score is then infinite or NaN and no softmax is defined, so attnlab refuses it"
        )
    return float(scale)


def _with_causal(m: torch.Tensor, L: int, S: int) -> torch.Tensor:
    """A 4-D mask tensor with upper-left causality added: bool AND, float -inf where causality hides."""
    keep = torch.ones(L, S, dtype=torch.bool, device=m.device).tril()
    if m.dtype == torch.bool:
        return m & keep
    return m.masked_fill(~keep, float("-inf"))


def empty_output(a: Args) -> torch.Tensor:
    """The answer when no score reaches the output (``a.trivial``): zeros (N, H, L, Ev), as PyTorch gives.

    Tied to q, k and v (and the sinks) through empty slices, so backward gives each its zero gradient of
    the right shape, and a NaN anywhere in the inputs cannot leak into the zeros. (With sinks a row that
    sees no key is 0 too: all its weight is on the sink, which carries no value.)
    """
    out = a.q.new_zeros(a.N, a.H, a.L, a.Ev)
    out = out + a.q[..., :0].sum() + a.k[..., :0].sum() + a.v[..., :0].sum()
    return out if a.sinks is None else out + a.sinks[:0].sum().to(out.dtype)
