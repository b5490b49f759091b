"""Dense SDPA with sinks: a numerically stable softmax over the keys (row max subtracted) with the sink's exp added
to the denominator.
"""

import math

import torch

TRUTH = {
    "api": "sdpa",
    "bugs": ["the row max is taken over the key scores only, so exp(sink - max) overflows to inf in float32 when the "
             "sink exceeds every visible score by more than ~88 (e.g. rows masked with a large negative float mask), "
             "giving 0/inf weights and NaN gradients"],
    "kind": "precision",
}


def kernel(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, *,
           sinks=None):
    if dropout_p > 0.0:
        raise NotImplementedError("dropout")
    cdt = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(cdt), key.to(cdt), value.to(cdt)
    H = q.shape[-3]
    if enable_gqa and k.shape[-3] != H:
        rep = H // k.shape[-3]
        k = k.repeat_interleave(rep, -3)
        v = v.repeat_interleave(rep, -3)
    L, S = q.shape[-2], k.shape[-2]
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    scores = torch.einsum("...le,...se->...ls", q, k) * scale
    if is_causal:
        scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(cdt)

    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(scores - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sinks.to(cdt).view(H, 1, 1) - row_max)
    weights = e / torch.where(denom == 0, torch.ones_like(denom), denom)
    return torch.einsum("...ls,...sd->...ld", weights, v).to(query.dtype)
