import torch


def attention_matrix(q, k, v):
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.transpose(-2, -1) / E
    scores = scores.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    weights = scores.softmax(dim=-2)
    return (weights @ v).to(dtype)
