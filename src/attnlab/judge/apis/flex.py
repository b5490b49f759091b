"""FlexAttention's ``flex_attention``: masks as functions of the indices, biases as score modifiers.

    flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False) -> out, or (out, lse) with return_lse=True

q, k, v are (B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, Ev), as SDPA's; ``score_mod(score, b, h, q_idx, kv_idx)``
changes each scaled score; ``block_mask`` is a ``torch.nn.attention.flex_attention.BlockMask`` made by
``create_block_mask`` from a mask function ``mask_mod(b, h, q_idx, kv_idx) -> bool``. A row whose every key is
masked gives zeros and a log-sum-exp of -inf. The lse is (B, H, L) float32 (float64 for float64 inputs).

These are already the oracle's terms: the grid's mask functions (``attnlab.masks``: causal, sliding windows,
documents, prefixes...), ``is_causal`` as the upper-left causal mask function, PyTorch's ``CausalBias`` as the
causal mask it names, and its score modifiers (softcap, ALiBi, relative and learnable biases) are handed over
as they are, so the case is the grid's own. What flex_attention has no argument for -- dropout, a mask given as
a tensor -- is skipped.

PyTorch's ``flex_attention`` itself has no backward on the CPU (torch 2.13), so the 2x rule's PyTorch baseline is
F.scaled_dot_product_attention with the equivalent dense mask (or, with a score modifier, PyTorch's plain
operations), as for every other case; ``tests/judge/test_apis.py`` checks that these semantics are
flex_attention's, forwards, on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from attnlab import masks as M
from attnlab.judge.apis.flash import flat_lse, split
from attnlab.judge.cases import CAUSAL_BIAS, MASK_FAMILIES, Case

NAME = "flex"
BACKWARD = True


def mask_fn(case: Case):
    """The case's mask as a function ``(b, h, q_idx, kv_idx, L, S) -> bool``; None: no mask."""
    if case.is_causal:
        return M.causal()
    if case.mask == "lower-right" or case.mask == CAUSAL_BIAS[1]:
        return M.causal_lower_right()
    if case.mask == CAUSAL_BIAS[0]:
        return M.causal()
    if case.mask in MASK_FAMILIES:
        return MASK_FAMILIES[case.mask](case.S or case.L)
    return None


def express(c: Case) -> Case | str:
    if c.dropout_p > 0:
        return "flex_attention takes no dropout_p"
    if c.is_causal and c.mask is not None:
        return "is_causal with a mask tensor: flex_attention takes one block_mask (the two as one mask function)"
    if c.mask is not None and mask_fn(c) is None:
        return ("a mask tensor: flex_attention takes masks as a block_mask made from a mask function, and biases "
                "as score_mod=")
    return replace(c, api=NAME)


def extra() -> list[Case]:
    return []


def block_mask(case: Case, B: int, device):
    """torch's BlockMask for the case's mask function (None without a mask)."""
    fn = mask_fn(case)
    if fn is None:
        return None
    from torch.nn.attention.flex_attention import create_block_mask  # imported only here: it costs seconds

    L, S = case.L, case.S or case.L
    return create_block_mask(lambda b, h, i, j: fn(b, h, i, j, L, S), B, case.H, L, S, device=str(device))


def call(fn, q, k, v, case: Case, args: dict, p: float, score_mod=None):
    B = math.prod(case.batch)
    q4, k4, v4 = (t.reshape(B, *t.shape[-3:]) for t in (q, k, v))  # the batch dims as one, (B, H, L, E)
    kw: dict = {"return_lse": True}
    if score_mod is not None:
        kw["score_mod"] = score_mod
    bm = block_mask(case, B, q.device)
    if bm is not None:
        kw["block_mask"] = bm
    if case.scale is not None:
        kw["scale"] = float(case.scale)
    if case.gqa:
        kw["enable_gqa"] = True
    out, lse = split(fn(q4, k4, v4, **kw))
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        return out, lse
    return out.reshape(*q.shape[:-1], out.shape[-1]), flat_lse(lse, B, case.H, case.L)
