import math

import torch


def attention_matrix(q, k, v):
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    # the last query lines up with the last key
    mask = torch.ones(L, S, dtype=torch.bool).triu(diagonal=S - L + 1)
    scores = scores.masked_fill(mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(dtype)
