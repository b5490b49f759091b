"""Level 2 of your attention lab: the same causal attention in four tensor lines.

    out = softmax(mask(q @ kᵀ / √E)) @ v        query i may look at keys 0 .. i only

Level 1 took a Python step per query and key. Here every query meets every key in one matrix
product, and four lines do the whole computation. Each is marked TODO; as it stands the function
runs, and gives the wrong answer. After each one, run

    attnlab lab check lab_matrix.py

It grades your function on the same grid as level 1 (forward and backward; float32, float64 and
bfloat16), says the likely cause of what fails, and measures its memory at T = 128, 512 and 2048:
holding the whole T x T matrix of scores, it should grow like T².
"""

TRUTH = {'api': 'level-2', 'level': 2, 'slips': ["softmax taken over dim -2 (the queries) instead of dim -1 (the keys): each key's column is normalised, not each query's row; every case fails"], 'kind': 'semantic'}

import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    # TODO 1 (scores)
    scores = torch.einsum("...ie,...je->...ij", q, k) / math.sqrt(E)
    # TODO 2 (mask)
    mask = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    # TODO 3 (softmax)
    weights = scores.softmax(dim=-2)
    # TODO 4 (values)
    out = torch.einsum("...ij,...jd->...id", weights, v)
    return out.to(dtype)
