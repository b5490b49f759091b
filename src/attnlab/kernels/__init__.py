"""Floor 1: HOW attention is computed.

Every form is a function with exactly the signature of PyTorch's
``F.scaled_dot_product_attention``::

    form(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False, **form_specific_keywords)

and is registered here by name. :func:`attention` is the one entry point; a new form is one file
plus one :func:`register` call, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import Unsupported as Unsupported  # a form's refusal, attnlab.kernels.Unsupported to its callers


@dataclass(frozen=True)
class Form:
    """A registered form of attention."""

    name: str
    fn: Callable[..., torch.Tensor]
    summary: str
    slow: bool = False  # True: explicit Python loops -- small sizes only
    max_work: int | None = None  # largest N*H*L*S a checker or benchmark should give it
    shared_dropout: bool = True  # drops the same weights as every attnlab form for one seed (kernels.dropout)
    distributed: bool = False  # True: runs only across the ranks of a torch.distributed process group (ring)
    score_mod: bool = False  # True: takes score_mod= (attnlab.mods), forward and backward
    unavailable: Callable[[torch.device], str | None] | None = None  # why it cannot run on a device (None: it can)
    sinks: bool = False  # True: takes sinks= (gpt-oss's per-head sink logits), forward and backward

    def why_not(self, device="cpu") -> str | None:
        """None when the form runs on ``device`` in this process, else the reason it does not."""
        return self.unavailable(torch.device(device)) if self.unavailable is not None else None


_REGISTRY: dict[str, Form] = {}


def register(name: str, fn: Callable[..., torch.Tensor], summary: str, *, slow: bool = False,
             max_work: int | None = None, shared_dropout: bool = True, distributed: bool = False,
             score_mod: bool = False, unavailable: Callable[[torch.device], str | None] | None = None,
             sinks: bool = False) -> None:
    """Add a form under ``name`` (it must take SDPA's arguments; ``score_mod=True`` if it takes score_mod=,
    ``sinks=True`` if it takes sinks=)."""
    _REGISTRY[name] = Form(name, fn, summary, slow, max_work, shared_dropout, distributed, score_mod,
                           unavailable, sinks)


def forms(distributed: bool = False, device="cpu") -> dict[str, Form]:
    """The registered forms that run in one process on ``device`` (None: whatever the device), by name;
    ``distributed=True`` adds those that need a group."""
    return {n: f for n, f in _REGISTRY.items()
            if (distributed or not f.distributed) and (device is None or f.why_not(device) is None)}


def get(name: str) -> Form:
    if not isinstance(name, str):
        raise TypeError(f"impl must be a form name (str), got {type(name).__name__}")
    if name not in _REGISTRY:
        raise ValueError(f"unknown impl {name!r}; known forms: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False, *, impl: str = "matrix", **kwargs) -> torch.Tensor:
    """Scaled dot-product attention, ``softmax(q k^T * scale + mask) v``, computed by form ``impl``.

    Same arguments and semantics as ``torch.nn.functional.scaled_dot_product_attention``:
    ``query (..., H, L, E)``, ``key (..., Hkv, S, E)``, ``value (..., Hkv, S, Ev)`` ->
    ``(..., H, L, Ev)``. A bool ``attn_mask`` marks with True the keys that take part; a float one
    is added to the scores; either broadcasts. ``is_causal=True`` is aligned upper-left as in
    PyTorch; for lower-right (KV-cache decoding) pass ``attn_mask=attnlab.masks.causal_lower_right()``.
    Rows whose every key is masked give zeros. Extra keywords go to the form (e.g. tile sizes).
    ``score_mod=`` (:mod:`attnlab.mods`) changes each scaled score before the mask, in the forms
    that support it (loops, matrix, flash).

    ``sinks=`` (H,): gpt-oss's attention sinks, one learnable logit per query head that joins each row's
    softmax as one more column and is then dropped -- ``softmax([s_i0 .. s_i,S-1, sink_h])`` over S + 1
    entries, the output ``sum_j w_ij v_j`` over the keys alone -- so a row may give part of its weight
    (a row that sees no key: all of it) to nothing. In the forms that take it (loops, matrix, flash,
    triton), forward and backward, with every mask, GQA, dropout and score modifier they take.
    """
    form = get(impl)
    if kwargs.get("score_mod") is not None and not form.score_mod:
        with_mods = ", ".join(n for n, f in _REGISTRY.items() if f.score_mod)
        raise Unsupported(f"form {impl!r} takes no score_mod; forms that do: {with_mods}")
    if kwargs.get("sinks") is not None and not form.sinks:
        with_sinks = ", ".join(n for n, f in _REGISTRY.items() if f.sinks)
        raise Unsupported(f"form {impl!r} takes no sinks; forms that do: {with_sinks}")
    return form.fn(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, **kwargs)


def _register_builtin() -> None:
    from . import flash, flash_triton, loops, matrix, ring, sdpa
    from .interpreter import interpreting

    register("loops", loops.attention, "explicit Python loops over batch, head, query and key",
             slow=True, max_work=1_000, score_mod=True, sinks=True)
    register("matrix", matrix.attention, "the four lines: scores, mask, softmax, weights @ v", score_mod=True,
             sinks=True)
    register("flash", flash.attention, "tiled online softmax, O(L) memory, FlashAttention-2 backward",
             score_mod=True, sinks=True)
    register("sdpa", sdpa.attention, "PyTorch's own F.scaled_dot_product_attention", shared_dropout=False)
    register("triton", flash_triton.attention, "FlashAttention-2 as Triton GPU kernels (CPU: Triton's interpreter)",
             slow=interpreting(), max_work=flash_triton.max_work(), shared_dropout=False,
             unavailable=flash_triton.unavailable, sinks=True)
    register("ring", ring.attention, "flash tiles over a sequence sharded across torch.distributed ranks",
             distributed=True)


_register_builtin()
