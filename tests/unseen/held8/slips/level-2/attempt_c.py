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

TRUTH = {'level': 2, 'api': 'level-2', 'slips': ["the score product q @ kᵀ / sqrt(E) is taken in the inputs' dtype and only then moved to the float32 work dtype (softmax and values in float32): for bfloat16 inputs the scores are rounded to bfloat16 before exp; fails the bfloat16 big (large-logit) out rows of the L=S shapes (7x7 E=8, 6x6 E=16, 12x12 E=32); float32/float64 and the bfloat16 gradients pass"], 'kind': 'precision'}

import math

import torch


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    v = v.to(work)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(E)).to(work)  # (..., L, S)
    mask = torch.ones(L, S, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v
    return out.to(dtype)
