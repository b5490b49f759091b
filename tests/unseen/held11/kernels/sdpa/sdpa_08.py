TRUTH = {'api': 'sdpa', 'bugs': ['the softmax is evaluated with torch.softmax(..., dtype=torch.float32), so for float64 inputs the probabilities (and their gradient) are computed and kept in float32; every float64 case fails (out and all grads, ~1e-7 relative error instead of ~1e-16); float32/bfloat16 are fine'], 'kind': 'precision'}
import math

import torch
import torch.nn.functional as F


def _upcast(x):
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    L, S = query.shape[-2], key.shape[-2]
    scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    q, k, v = _upcast(query), _upcast(key), _upcast(value)
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)

    attn_bias = torch.zeros(L, S, dtype=q.dtype)
    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool).tril(diagonal=0)
        attn_bias = attn_bias.masked_fill(causal.logical_not(), float('-inf'))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_bias = attn_bias.masked_fill(attn_mask.logical_not(), float('-inf'))
        else:
            attn_bias = attn_mask.to(q.dtype) + attn_bias

    attn_weight = q @ k.transpose(-2, -1) * scale_factor
    attn_weight = attn_weight + attn_bias
    dead = torch.isneginf(attn_weight).all(dim=-1, keepdim=True)
    attn_weight = attn_weight.masked_fill(dead, 0.0)
    attn_weight = F.softmax(attn_weight, dim=-1, dtype=torch.float32)
    attn_weight = attn_weight.masked_fill(dead, 0.0).to(v.dtype)
    return (attn_weight @ v).to(query.dtype)
