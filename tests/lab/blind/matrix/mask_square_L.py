import math

import torch


def attention_matrix(q, k, v):
    T, E, dtype = q.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    mask = torch.tril(torch.ones(T, T)) == 0  # (T, T) causal mask
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).to(dtype)
