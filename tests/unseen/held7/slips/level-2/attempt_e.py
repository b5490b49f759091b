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
 'bugs': ['scaled by 1/sqrt(v.shape[-1]) (Ev) instead of 1/sqrt(E): right only where Ev == E, wrong in the '
          'E=8, Ev=6 shapes',
          'scores.masked_fill(future, -inf) is called but its result is thrown away (masked_fill is not in '
          'place), so no causal mask is applied and every query sees the future keys (every case)'],
 'kind': 'two'}


import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = q @ k.mT / math.sqrt(v.shape[-1])
    qi = torch.arange(L, device=q.device)
    kj = torch.arange(S, device=q.device)
    future = kj[None, :] > qi[:, None]  # (L, S)
    scores.masked_fill(future, float("-inf"))
    attn = scores.softmax(dim=-1)
    out = attn @ v
    return out.to(dtype)
