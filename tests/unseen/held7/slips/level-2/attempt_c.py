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

TRUTH = {'api': 'level-2',
 'bugs': ['the causal mask is built with shape (S, L) -- torch.ones(S, L).triu(1) -- instead of (L, S): when '
          'L == S it happens to be right, when L != S masked_fill cannot broadcast it against the (..., L, '
          'S) scores and raises (L=5,S=9 and L=9,S=5 cases)'],
 'kind': 'semantic'}


import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.mT / math.sqrt(E)
    i_pos = torch.arange(L, device=q.device)
    j_pos = torch.arange(S, device=q.device)
    future = torch.ones(S, L, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = weights @ v
    return out.to(dtype)
