"""Textbook SDPA: scores in float32, -inf where masked, torch.softmax, matmul with v.

Supports bool/float masks, upper-left causal, GQA and any leading batch dims.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": [
        "a query row whose mask (bool attn_mask, causal, or all -inf float mask) hides every key goes through "
        "torch.softmax over all -inf and returns NaN (output and gradients) instead of zeros"
    ],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p != 0.0:
        raise NotImplementedError("dropout not implemented")
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    L, S = query.shape[-2], key.shape[-2]
    scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    attn_bias = torch.zeros(L, S, dtype=ct, device=query.device)
    if is_causal:
        temp_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril(diagonal=0)
        attn_bias = attn_bias.masked_fill(temp_mask.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_bias = attn_bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            attn_bias = attn_mask.to(ct) + attn_bias
    k, v = key, value
    if enable_gqa:
        k = k.repeat_interleave(query.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(query.size(-3) // v.size(-3), -3)
    attn_weight = query.to(ct) @ k.to(ct).transpose(-2, -1) * scale_factor
    attn_weight = attn_weight + attn_bias
    attn_weight = torch.softmax(attn_weight, dim=-1)
    return (attn_weight @ v.to(ct)).to(query.dtype)
