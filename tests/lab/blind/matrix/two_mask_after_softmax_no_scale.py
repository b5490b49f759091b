import torch


def attention_matrix(q, k, v):
    L, S, dtype = q.shape[-2], k.shape[-2], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    w = w.masked_fill(torch.triu(torch.ones(L, S, dtype=torch.bool), 1), 0.0)
    return (w @ v).to(dtype)
