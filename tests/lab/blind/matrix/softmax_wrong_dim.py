import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev)."""
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    mask = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, -math.inf)
    weights = torch.softmax(scores, dim=-2)  # normalise over the queries
    out = weights @ v
    return out.to(dtype)
