"""PyTorch's own ``F.scaled_dot_product_attention``, registered for comparison.

attnlab's mask functions (``attnlab.masks``) are handed to it as the equivalent dense bool tensor.
Its dropout uses PyTorch's random stream, so it does not drop the same weights as attnlab's forms.
"""

from __future__ import annotations

import torch.nn.functional as F

from ._check import check


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    a = check(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mask = a.mask.dense(a.N, a.H, a.L, a.S, device=a.q.device) if a.mask is not None else a.attn_mask
    is_causal = a.is_causal
    if is_causal and a.scale < 0:  # PyTorch 2.13's CPU kernel answers NaN here; the same mask, spelled out, does not
        mask, is_causal = a.dense_mask(), False
    out = F.scaled_dot_product_attention(
        a.q, a.k, a.v, attn_mask=mask, dropout_p=a.dropout_p, is_causal=is_causal, scale=a.scale,
        enable_gqa=a.groups > 1,
    )
    return a.unflatten(out)
