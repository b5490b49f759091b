import torch


def attention_matrix(q, k, v):
    L, S, dtype = q.shape[-2], k.shape[-2], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1)  # (..., L, S)
    mask = torch.ones(L, S, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).to(dtype)
