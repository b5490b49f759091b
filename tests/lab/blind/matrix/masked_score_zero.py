import math

import torch


def attention_matrix(q, k, v):
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    att = q @ k.transpose(-2, -1) / math.sqrt(E)
    keep = torch.tril(torch.ones(L, S))  # lower triangle = allowed
    att = att * keep  # knock out the future scores
    att = torch.softmax(att, dim=-1)
    return (att @ v).to(dtype)
