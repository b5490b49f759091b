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

import math

import torch

TRUTH = {"api": "level-2", "bugs": ["The scale is made as torch.rsqrt(torch.tensor(float(E))), a float32 tensor, so in the float64 path every score is multiplied by 1/sqrt(E) rounded to float32 (relative error up to ~1e-7 instead of ~1e-16); it should be a Python float or a float64 value; shows on float64 inputs whenever 1/sqrt(E) is not exact in float32 (E not a power of 4, e.g. 8, 24, 32)."], "kind": "precision"}


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scale = torch.rsqrt(torch.tensor(float(E)))
    scores = (q @ k.transpose(-2, -1)) * scale
    mask = torch.triu(torch.ones(L, S, dtype=torch.bool, device=q.device), 1)
    scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = weights @ v
    return out.to(dtype)

