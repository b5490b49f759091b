"""SDPA with sinks as "softmax over the keys, then shrink by the keys' share": softmax(s) @ v * (1 - p_sink).

1 - p_sink = exp(lse - logaddexp(lse, sink)), the same as putting exp(sink) in the denominator; autograd does the
backward.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["on the sinks path the keys' softmax is taken without the fully-masked-row guard that the no-sink path "
             "has, so with sinks a row whose keys are all masked returns NaN (and NaN gradients) instead of 0"],
    "kind": "semantic",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout is not implemented")
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    if enable_gqa and q.size(-3) != k.size(-3):
        g = q.size(-3) // k.size(-3)
        k, v = k.repeat_interleave(g, dim=-3), v.repeat_interleave(g, dim=-3)
    L, S = q.size(-2), k.size(-2)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    s = (q @ k.mT) * scale
    if is_causal:
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -math.inf) if attn_mask.dtype == torch.bool else s + attn_mask.to(ct)

    if sinks is None:
        dead = torch.isneginf(s).all(-1, keepdim=True)
        p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
        return (p @ v).to(query.dtype)

    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse)  # keys-only softmax
    keep = torch.exp(lse - torch.logaddexp(lse, sinks.to(ct).view(-1, 1, 1)))  # = 1 - p_sink
    return ((p @ v) * keep).to(query.dtype)
