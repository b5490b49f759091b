"""The score-modifier cases of ``attnlab verify``: modifiers built for a case, and PyTorch's side.

A modifier case runs a form with ``score_mod=`` and compares its output and gradients -- for q, k,
v *and* for the tensors the modifier holds (ALiBi slopes, a relative-bias table) -- with the float64
oracle, which applies the same modifier built on float64 copies of those tensors.

PyTorch's ``F.scaled_dot_product_attention`` takes no score modifier, so the tolerance rule's
"PyTorch's own error" is measured on PyTorch's plain operations in the input dtype (matmul, the
modifier, masked_fill, softmax, matmul): what a user would write without attnlab, as
FlexAttention's own tests do. There are two equally natural orders -- scale the scores, or fold
the scale into q first, as PyTorch's own math kernel does -- and their errors differ by chance from
seed to seed; the rule takes the larger of the two, per quantity, as PyTorch's error. A modifier
that only adds a bias (ALiBi, relative bias) is also given to SDPA itself as a float mask, and
SDPA's error counts too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch

from attnlab.kernels import mods

# name -> (H, generator, dtype) -> (the Mod's tensors, build(tensors) -> Mod). The tensors are
# made once per case; each run builds the modifier on its own copies of them.
CAP = 2.0  # scores of random unit inputs are about N(0, 1): a cap of 2 bends many of them
BUCKETS, MAX_DISTANCE = 16, 64


def _softcap(H, g, dt):
    return [], lambda ts: mods.softcap(CAP)


def _alibi(H, g, dt):
    return [], lambda ts: mods.alibi(H)


def _alibi_slopes(H, g, dt):
    return [mods.alibi_slopes(H).to(dt) * (1 + torch.rand(H, generator=g).to(dt))], \
        lambda ts: mods.alibi(slopes=ts[0])


def _relative_bias(H, g, dt):
    return [torch.randn(H, BUCKETS, generator=g).to(dt)], \
        lambda ts: mods.relative_bias(ts[0], max_distance=MAX_DISTANCE, bidirectional=True)


def _alibi_softcap(H, g, dt):
    return [], lambda ts: mods.compose(mods.alibi(H), mods.softcap(CAP))


def hide_rows(score, b, h, q_idx, kv_idx):
    """Every key of every fifth query (2, 7, 12, ...) hidden: a modifier used as a mask, rows left with no key."""
    return torch.where(q_idx % 5 == 2, float("-inf"), score)


def _hide_rows(H, g, dt):
    return [], lambda ts: mods.Mod.from_fn(hide_rows, "hide rows")


def _unlisted(H, g, dt):
    """A learnable bias per head and key (key positions taken modulo 16) that the modifier reads without listing
    it in ``params``: its gradient is compared all the same (the judge differentiates the tensors it made, not
    the Mod's list), so a form that finds only listed tensors fails here."""
    return [torch.randn(H, BUCKETS, generator=g).to(dt)], \
        lambda ts: mods.Mod.from_fn(lambda score, b, h, q_idx, kv_idx: score + ts[0][h, kv_idx % BUCKETS],
                                    "unlisted bias")


ADDITIVE = {"alibi", "alibi slopes", "relative_bias"}  # score + bias: SDPA can take the bias as a float mask

MOD_FAMILIES: dict[str, Callable] = {
    "softcap": _softcap,
    "alibi": _alibi,
    "alibi slopes": _alibi_slopes,
    "relative_bias": _relative_bias,
    "alibi then softcap": _alibi_softcap,
    "hide rows": _hide_rows,  # rows with no visible key: zeros and zero gradients, as a mask's (FlexAttention's rule)
    "unlisted bias": _unlisted,  # a learnable tensor not in params: it gets its gradient in every form
}
PARAM_NAMES = {"alibi slopes": ["dslopes"], "relative_bias": ["dtable"], "unlisted bias": ["dbias"]}
# The gradient of ALiBi slopes is a sum over every (query, key) pair of dS * (kv_idx - q_idx), whose
# terms cancel row by row: in float32 its rounding error depends on the order of the sums, and two
# correct implementations differ by up to 3x from seed to seed, so the 2x rule cannot judge it. It is
# checked in float64 (here and by gradcheck), where the rule's floor is what matters. The unlisted bias
# is there to catch a gradient that never arrives (None or zero), which float64 shows as well as any
# dtype; its float32 sums come within 0.95 of the 2x rule over 15 seeds, too close to hold for every seed.
FLOAT64_ONLY = {"alibi slopes", "unlisted bias"}


def make(name: str, H: int, seed: int, dtype: torch.dtype):
    """(tensors, build) for the modifier family ``name``; tensors are seeded and in ``dtype``."""
    g = torch.Generator().manual_seed(seed + 7919)
    return MOD_FAMILIES[name](H, g, dtype)


def takes_score_mod(fn: Callable) -> bool:
    """Whether a function accepts a ``score_mod=`` keyword (or ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "score_mod" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def eager(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
          *, score_mod=None, fold_scale=False):
    """PyTorch's plain operations in the input dtype, with a score modifier: the rule's "PyTorch" side.

    ``fold_scale=True`` multiplies q by the scale before the matmul instead of the scores after it.
    """
    H, Hkv, L, S = query.shape[-3], key.shape[-3], query.shape[-2], key.shape[-2]
    if enable_gqa and Hkv != H:
        key = key.repeat_interleave(H // Hkv, dim=-3)
        value = value.repeat_interleave(H // Hkv, dim=-3)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if fold_scale:
        scores = (query * scale) @ key.transpose(-2, -1)  # (..., H, L, S)
    else:
        scores = query @ key.transpose(-2, -1) * scale
    lead = scores.shape[:-3]
    s4 = scores.reshape(-1, H, L, S)
    if score_mod is not None:
        s4 = mods.apply_dense(mods.as_mod(score_mod), s4)
    scores = s4.reshape(*lead, H, L, S)
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # no visible key: zeros, as SDPA gives for masked rows
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    return weights @ value


def sdpa_bias(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
              *, score_mod=None):
    """An additive modifier as PyTorch's SDPA sees it: its bias (the modifier applied to zero scores) as a
    float mask, the case's mask folded in; gradients reach the modifier's tensors through the bias."""
    H, L, S = query.shape[-3], query.shape[-2], key.shape[-2]
    lead = query.shape[:-3]
    zeros = torch.zeros(math.prod(lead), H, L, S, dtype=query.dtype)
    bias = mods.apply_dense(mods.as_mod(score_mod), zeros).reshape(*lead, H, L, S)
    if is_causal:
        attn_mask, is_causal = torch.ones(L, S, dtype=torch.bool).tril(), False
    if attn_mask is not None:
        bias = bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else bias + attn_mask
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scale,
                                                            enable_gqa=enable_gqa)


def eager_folded(*args, **kwargs):
    """:func:`eager` with the scale folded into q."""
    return eager(*args, **kwargs, fold_scale=True)
