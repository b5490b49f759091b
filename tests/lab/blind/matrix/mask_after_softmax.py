import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev)."""
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)  # (..., L, S)
    weights = torch.softmax(scores, dim=-1)
    causal = torch.tril(torch.ones(L, S))  # 1 where key j <= query i
    weights = weights * causal  # zero the future
    out = weights @ v
    return out.to(dtype)
