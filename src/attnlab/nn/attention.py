"""Attention as a module: projections, heads, a form of attention, and a cache for decoding.

The lesson's module, step by step, for an input x of shape (B, T, C):

    q, k, v = split(x @ W_qkv)         # one fused projection; (B, T, C) each
    q, k, v = heads(q), heads(k), ...  # (B, H, T, d) with d = C / H: H small attentions side by side
    y = attention(q, k, v, causal)     # (B, H, T, d): each token averages the values it may see
    y = merge(y) @ W_o                 # (B, T, C): heads concatenated, then mixed by the output projection

Variations, each one switch:

* **grouped-query attention** (Ainslie et al., 2023): ``n_kv_head < n_head`` key/value heads, each
  shared by ``n_head / n_kv_head`` query heads (``n_kv_head=1`` is multi-query attention). The
  KV cache shrinks by the same factor.
* **RoPE** (:mod:`attnlab.nn.rope`): position enters as a rotation of q and k.
* **tie_kv**: the value projection *is* the key projection (v = k before RoPE) -- the ablation
  behind "why is the value matrix separate from the key?".
* **scale**: ``"sqrt"`` (1/sqrt(d), the default), ``"none"`` (1), ``"inv"`` (1/d) or a number.
* **impl**: any registered form (``attnlab.forms()``) computes the attention itself.
* **sinks** (gpt-oss, OpenAI 2025): one learnable logit per head that joins every row's softmax as a
  column with no value, so a query may give part of its weight -- or all of it -- to nothing instead
  of being forced to spread it over the keys. Passed to the form as ``sinks=`` (the forms that take
  them: loops, matrix, flash, triton). They start at 0, a sink as heavy as a key whose score is 0:
  OpenAI's reference model leaves them uninitialised for its checkpoint to fill, and transformers'
  GptOss draws them from N(0, initializer_range = 0.02); zeros are that draw's mean, and the same on
  every run.

**KV cache.** When decoding, token t only needs its own query against the keys and values of
tokens 0..t. The cache keeps those keys and values, so each new token costs one row of attention
instead of a whole new T x T matrix. The new queries sit at the *end* of the keys, so the causal
mask must be aligned lower-right (query i sees key j when j <= i + S - L). PyTorch's
``is_causal=True`` aligns upper-left, and a single decoding query would see only the first key
(pytorch/pytorch#144858); we pass :func:`attnlab.kernels.masks.causal_lower_right` instead.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnlab import kernels
from attnlab.kernels import masks, matrix
from attnlab.kernels.argcheck import is_real, positive_int, real_in_range

from . import rope as rotary
from .shard import SeqShard

SCALES = ("sqrt", "none", "inv")
_LOWER_RIGHT = masks.causal_lower_right()


def resolve_scale(scale, head_dim: int) -> float:
    """``"sqrt"`` -> 1/sqrt(d), ``"none"`` -> 1, ``"inv"`` -> 1/d, a positive number -> itself."""
    if isinstance(scale, str):
        if scale == "sqrt":
            return 1.0 / math.sqrt(head_dim)
        if scale == "none":
            return 1.0
        if scale == "inv":
            return 1.0 / head_dim
        raise ValueError(f"scale must be 'sqrt', 'none', 'inv' or a positive number, got {scale!r}")
    if not is_real(scale):
        raise TypeError(f"scale must be 'sqrt', 'none', 'inv' or a positive number, got {type(scale).__name__}")
    if not math.isfinite(float(scale)) or float(scale) <= 0:
        raise ValueError(f"scale must be a positive, finite number, got {scale}")
    return float(scale)


class KVCache:
    """The keys and values one attention layer has seen so far: (B, Hkv, S, d) each, S growing."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's keys and values (B, Hkv, T, d); return all of them, (B, Hkv, S + T, d)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[:2] != self.k.shape[:2]:
                raise ValueError(f"cache holds batch/heads {tuple(self.k.shape[:2])}, got keys {tuple(k.shape)}")
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v


class MultiHeadAttention(nn.Module):
    """Causal multi-head self-attention with optional GQA/MQA, RoPE, tied K/V and a KV cache."""

    def __init__(self, d_model: int, n_head: int, n_kv_head: int | None = None, dropout: float = 0.0, *,
                 rope: bool = False, rope_base: float = 10000.0, tie_kv: bool = False, bias: bool = True,
                 impl: str = "sdpa", scale="sqrt", sinks: bool = False):
        super().__init__()
        positive_int("d_model", d_model)
        positive_int("n_head", n_head)
        n_kv_head = n_head if n_kv_head is None else positive_int("n_kv_head", n_kv_head)
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        if n_head % n_kv_head:
            raise ValueError(f"n_head={n_head} is not a multiple of n_kv_head={n_kv_head} (GQA shares whole groups)")
        real_in_range("dropout", dropout, 0.0, 1.0, high_open=True)
        kernels.get(impl)  # an unknown form is an error now, not at the first forward
        self.d_model, self.n_head, self.n_kv_head = d_model, n_head, n_kv_head
        self.head_dim = d_model // n_head
        if rope:
            rotary.frequencies(self.head_dim, rope_base)  # checks an even head_dim and the base
        self.rope, self.rope_base, self.tie_kv = bool(rope), float(rope_base), bool(tie_kv)
        self.impl, self.scale_name = impl, scale
        self.scale = resolve_scale(scale, self.head_dim)
        self.dropout = float(dropout)
        kv_width = n_kv_head * self.head_dim
        self.qkv = nn.Linear(d_model, d_model + (1 if tie_kv else 2) * kv_width, bias=bias)  # fused q, k(, v)
        self.proj = nn.Linear(d_model, d_model, bias=bias)
        self.resid_drop = nn.Dropout(dropout)
        if not isinstance(sinks, bool):
            raise TypeError(f"sinks must be True or False (one learnable sink logit per head), got {sinks!r}")
        if sinks and not kernels.get(impl).sinks:
            able = ", ".join(n for n, f in kernels.forms(device=None).items() if f.sinks)
            raise ValueError(f"sinks=True needs a form that takes sinks; {impl!r} does not (forms that do: {able})")
        # (H,): gpt-oss's per-head sink logits, 0 to start (see the module docstring); None without sinks
        self.sinks = nn.Parameter(torch.zeros(n_head)) if sinks else None
        self.keep_scores = False  # the probe's switch: compute explicitly and keep the scores (see forward)
        self.scores: torch.Tensor | None = None

    def extra_repr(self) -> str:
        return (f"n_head={self.n_head}, n_kv_head={self.n_kv_head}, head_dim={self.head_dim}, rope={self.rope}, "
                f"tie_kv={self.tie_kv}, scale={self.scale_name!r}, impl={self.impl!r}"
                + (", sinks=True" if self.sinks is not None else ""))

    def project(self, x: torch.Tensor, offset: int = 0,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, T, d), k and v (B, Hkv, T, d) for tokens at positions offset .. offset + T - 1
        (or at ``positions`` (T,), the global positions of a sequence shard)."""
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (B, T, {self.d_model}), got {shape}")
        B, T, _ = x.shape
        H, Hkv, d = self.n_head, self.n_kv_head, self.head_dim
        parts = self.qkv(x).split([H * d] + [Hkv * d] * (1 if self.tie_kv else 2), dim=-1)
        q = parts[0].view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
        k = parts[1].view(B, T, Hkv, d).transpose(1, 2)  # (B, Hkv, T, d)
        v = k if self.tie_kv else parts[2].view(B, T, Hkv, d).transpose(1, 2)  # (B, Hkv, T, d)
        if self.rope:
            pos = torch.arange(offset, offset + T, device=x.device) if positions is None else positions
            q, k = rotary.apply(q, pos, self.rope_base), rotary.apply(k, pos, self.rope_base)
        return q, k, v

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, shard: SeqShard | None = None) -> torch.Tensor:
        """(B, T, C) -> (B, T, C). With a cache, x holds the next T tokens after those already cached.

        With a ``shard`` (:class:`attnlab.nn.shard.SeqShard`), x holds this rank's tokens of each sequence:
        RoPE turns them by their global positions and attention is the ring form over the shard's group.
        """
        if shard is not None:
            return self._ring(x, cache, shard)
        past = len(cache) if cache is not None else 0
        q, k, v = self.project(x, offset=past)  # checks x is (B, T, C)
        B, T, C = x.shape
        mask, causal = None, True
        if cache is not None:
            k, v = cache.append(k, v)  # (B, Hkv, past + T, d)
            if past:  # new queries sit at the end of the keys: lower-right causal alignment
                mask, causal = _LOWER_RIGHT, False
        if self.keep_scores:
            y = self._explicit(q, k, v, past)
        else:
            y = kernels.attention(q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0,
                                  is_causal=causal, scale=self.scale, enable_gqa=self.n_kv_head != self.n_head,
                                  impl=self.impl, **self._sinks())  # (B, H, T, d)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C): the heads side by side
        return self.resid_drop(self.proj(y))

    def _ring(self, x: torch.Tensor, cache: KVCache | None, shard: SeqShard) -> torch.Tensor:
        """Context parallel: this rank's tokens attend to every earlier token of the sequence, wherever it is held."""
        if cache is not None or self.keep_scores:
            raise ValueError("a sequence shard trains or scores whole sequences: it takes no KV cache and no "
                             "score probe (run those in one process)")
        q, k, v = self.project(x, positions=shard.positions.to(x.device))  # (B, H, T, d), (B, Hkv, T, d) x 2
        B, T, C = x.shape
        y = kernels.attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True,
                              scale=self.scale, enable_gqa=self.n_kv_head != self.n_head, impl="ring",
                              group=shard.group, layout=shard.layout, **self._sinks())  # (B, H, T, d): this rank's
        # queries (the ring form takes no sinks: with them it says so, by name)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, C)))

    def _sinks(self) -> dict:
        """The keyword that hands the sinks to a form, or nothing: a form without sinks is called as before."""
        return {} if self.sinks is None else {"sinks": self.sinks}

    def _explicit(self, q, k, v, past: int) -> torch.Tensor:
        """Attention written out, keeping the scores so a probe can read their gradient (no dropout)."""
        groups = self.n_head // self.n_kv_head
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, S, d)
        s = (q @ k.transpose(-2, -1)) * self.scale  # (B, H, T, S): what the softmax sees
        if s.requires_grad:
            s.retain_grad()
        self.scores = s
        T, S = s.shape[-2:]
        visible = torch.ones(T, S, dtype=torch.bool, device=s.device).tril(diagonal=S - T)  # lower-right causal
        s = s.masked_fill(~visible, float("-inf"))
        w = torch.softmax(s, dim=-1) if self.sinks is None else matrix.sink_softmax(s, self.sinks.to(s.dtype))
        return w @ v  # (B, H, T, d)

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The causal softmax weights (B, H, T, T) this layer gives input x, from the matrix form (with sinks, the
        keys' share: the sink's column is dropped)."""
        q, k, v = self.project(x)
        _, w = matrix.attention(q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.n_kv_head != self.n_head,
                                return_weights=True, **self._sinks())
        return w  # with sinks, the keys' weights: a row sums to less than 1

