"""Causal attention in four tensor lines: scores, mask, softmax, weighted values."""

TRUTH = {
    "api": "level-2",
    "bugs": ["the softmax is taken over dim=-2 (the queries, like NumPy's axis=0 on an (L, S) matrix) instead of the "
             "keys: each key's column adds up to 1, not each query's row"],
    "kind": "semantic",
}

import math  # noqa: E402

import torch  # noqa: E402


def attention_matrix(q, k, v):
    """Causal attention as matrix products: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev).

    Query i sees keys 0 .. i: the mask is aligned at the top left, as PyTorch's is_causal=True.
    """
    L, S, E, dtype = q.shape[-2], k.shape[-2], q.shape[-1], q.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32  # half precision is computed in float32
    q, k, v = q.to(work), k.to(work), v.to(work)
    scores = torch.zeros(*q.shape[:-1], S, dtype=work)  # (..., L, S)
    scores = q @ k.transpose(-2, -1) / math.sqrt(E)
    mask = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    weights = scores
    weights = torch.softmax(weights, dim=-2)
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=work)
    out = weights @ v
    return out.to(dtype)
