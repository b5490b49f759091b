"""attnlab's forms inside Hugging Face transformers models: one call registers them all.

    import attnlab.hf
    attnlab.hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="attnlab")   # the flash form

transformers runs every attention layer through a function it looks up by name (its
``AttentionInterface``). :func:`register` adds one such function per single-process form:
``"attnlab"`` for the flash form and ``"attnlab_<form>"`` for the others (``attnlab_matrix``,
``attnlab_loops``, ...). The flash form is plain ``"attnlab"`` because transformers
treats any name containing "flash" as a FlashAttention kernel to fetch from its hub, and fails with
"Could not find the currently requested flash attention implementation".

Each name also gets transformers' SDPA mask builder, so a layer receives what the ``sdpa``
implementation receives: a bool mask (True = attend) that already holds padding, causality, a
sliding window or packed-sequence boundaries -- or no mask at all, when plain causal attention
(``is_causal``) says the same. The function then makes the same choices PyTorch's SDPA path does,
hands GQA to the form (``enable_gqa``), the model's ``scaling``, its attention dropout, Gemma 2's
soft-capping as a score modifier (:func:`attnlab.mods.softcap`) and gpt-oss's attention sinks (the
``s_aux`` a gpt-oss layer hands over: its per-head sink logits) as ``sinks=``, and returns
(B, L, H, d) as transformers expects (with the weights, for ``output_attentions=True``, from the
matrix form). What a form cannot do (soft-capping without score modifiers, sinks in a form that
takes none) is a clear error, not a silent wrong answer. The sdpa form is PyTorch's own, which
transformers has as "sdpa".

transformers is an optional extra: ``pip install 'attnlab[hf]'``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from attnlab import kernels
from attnlab._extras import MissingExtra as MissingExtra  # the one install error, attnlab.hf.MissingExtra too
from attnlab._extras import require
from attnlab.kernels.mods import softcap as _softcap


def from_pretrained(cls, name_or_path: str, **kwargs):
    """``cls.from_pretrained(name_or_path, **kwargs)`` (a transformers Auto class), failing fast without a network.

    A local folder loads as it is. A hub name is read from the local cache first, with no network call
    at all; only a model that is not there is fetched, and only when the hub answers -- where it
    cannot be reached the error says so at once, instead of after a minute of retries.
    """
    import huggingface_hub.constants as hub

    if Path(str(name_or_path)).exists() or hub.HF_HUB_OFFLINE:
        return cls.from_pretrained(name_or_path, **kwargs)
    try:
        return cls.from_pretrained(name_or_path, local_files_only=True, **kwargs)
    except OSError:  # not (wholly) in the cache: fetch it, if the hub answers
        pass
    why = hub_unreachable(hub.ENDPOINT)
    if why is not None:
        raise OSError(f"{name_or_path} is not in the local Hugging Face cache ({hub.HF_HUB_CACHE}) and the hub cannot "
                      f"be reached ({why}): download it once where there is a network, or pass a local folder")
    return cls.from_pretrained(name_or_path, **kwargs)


def hub_unreachable(endpoint: str, timeout_s: float = 5.0) -> str | None:
    """None when a connection to the hub's ``endpoint`` opens (or a proxy is set, which decides for itself),
    else why not, in a few words."""
    import os
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return None
    url = urlsplit(endpoint)
    host, port = url.hostname or endpoint, url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        return f"{host}:{port}: {e.strerror or type(e).__name__}"
    return None


def impl_name(form: str) -> str:
    """The transformers name of a form: "attnlab" for flash, "attnlab_<form>" otherwise, never with "flash" in it."""
    rest = form.replace("flash", "").strip("_")
    return "attnlab" + (f"_{rest}" if rest else "")


def names() -> dict[str, str]:
    """transformers name -> attnlab form, for every form that runs in one process but ``sdpa``.

    The sdpa form is PyTorch's own, which transformers already has as "sdpa" (and transformers
    reads any name containing "sdpa" as its own implementation).
    """
    return {impl_name(n): n for n in kernels.forms() if n != "sdpa"}


def attention_forward(form: str) -> Callable:
    """The function transformers calls for each attention layer, computing with attnlab form ``form``."""
    f = kernels.get(form)

    def forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, softcap: float | None = None, **kwargs):
        # query (B, H, L, d), key / value (B, Hkv, S, d); transformers wants (B, L, H, d) back
        key, value, attention_mask, causal = arguments(module, query, key, value, attention_mask, is_causal, kwargs)
        extra = _extras(f, softcap, _sinks(kwargs))
        out = f.fn(query, key, value, attention_mask, float(dropout or 0.0), causal, scaling,
                   key.shape[1] != query.shape[1], **extra)  # (B, H, L, d)
        out, weights = out if isinstance(out, tuple) else (out, None)
        return out.transpose(1, 2).contiguous(), weights

    forward.__name__ = f"attnlab_{form}_attention_forward"
    return forward


def arguments(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, is_causal: bool | None, kwargs: dict) -> tuple:
    """(key, value, attn_mask, is_causal) in SDPA's terms from what transformers hands an attention function."""
    L, S = query.shape[2], key.shape[2]
    attention_mask = _mask(attention_mask, kwargs.get("position_bias"), S, query.dtype)
    # as transformers' sdpa path: causal only with no mask and more than one query; a single
    # decoding query sees every cached key (no mask needed)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(L > 1 and attention_mask is None and causal)
    if causal and S > L:  # prefill into an empty static cache: the keys past L are empty slots
        key, value = key[:, :, :L], value[:, :, :L]
    return key, value, attention_mask, causal


def _mask(attention_mask: torch.Tensor | None, bias: torch.Tensor | None, S: int, dtype: torch.dtype):
    """transformers' mask cut to the S keys (a float one in the query's dtype), with a T5-style float
    ``position_bias`` added to it: the ``attn_mask`` an attnlab form takes."""
    if attention_mask is not None:
        attention_mask = attention_mask[:, :, :, :S]
        if attention_mask.dtype != torch.bool and attention_mask.dtype != dtype:
            attention_mask = attention_mask.to(dtype)
    if bias is None:
        return attention_mask
    bias = bias[:, :, :, :S].to(dtype)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        return bias.masked_fill(~attention_mask, float("-inf"))
    return bias if attention_mask is None else bias + attention_mask


def _sinks(kwargs: dict) -> torch.Tensor | None:
    """The layer's attention sinks: gpt-oss hands them over as ``s_aux`` (its ``sinks`` parameter, (H,)); ``sinks``
    is taken under its own name too."""
    for name in ("s_aux", "sinks"):
        if kwargs.get(name) is not None:
            return kwargs[name]
    return None


def _extras(f: kernels.Form, softcap: float | None, sinks: torch.Tensor | None = None) -> dict:
    """The keyword-only extras form ``f`` is called with: a soft-cap score modifier, the sinks, the matrix form's
    weights."""
    form, extra = f.name, {}
    if softcap is not None:
        if not f.score_mod:
            able = ", ".join(impl_name(n) for n, x in kernels.forms().items() if x.score_mod)
            raise NotImplementedError(f"this model soft-caps its attention scores (softcap={softcap}) and form "
                                      f"{form!r} has no score modifiers; use one of: {able}")
        extra["score_mod"] = _softcap(float(softcap))
    if sinks is not None:
        if not f.sinks:
            able = ", ".join(impl_name(n) for n, x in kernels.forms().items() if x.sinks)
            raise NotImplementedError(f"this model has attention sinks (gpt-oss's s_aux) and form {form!r} takes none; "
                                      f"use one of: {able}")
        extra["sinks"] = sinks
    if form == "matrix":  # the one form that holds the weights: hand them over (output_attentions=True)
        extra["return_weights"] = True
    return extra


def register() -> dict[str, str]:
    """Register every single-process form with transformers. Returns {transformers name: form}.

    Calling it again re-registers (a form registered since is added). Needs ``attnlab[hf]``.
    """
    require("transformers")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    mapping = names()
    for name, form in mapping.items():
        AttentionInterface.register(name, attention_forward(form))
        AttentionMaskInterface.register(name, sdpa_mask)  # the same bool masks the sdpa implementation gets
    return mapping
