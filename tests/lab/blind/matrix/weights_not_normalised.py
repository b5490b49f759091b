import math

import torch


def attention_matrix(q, k, v):
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)  # (..., L, S)
    future = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, -math.inf)
    # softmax: exp of the scores minus each row's max
    weights = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    out = weights @ v
    return out.to(dtype)
